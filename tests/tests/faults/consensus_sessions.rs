//! The session behind every etcd and ZooKeeper lock: a holder whose server dies keeps its
//! locks on another within its session; a holder cut off from the cluster past its session
//! loses its locks (it is told so by its deadline, another process takes them with a larger
//! fence); a backend that is dropped frees its locks at once; a release lost while the cluster
//! is down frees its lock once the cluster is back. The scenarios are in
//! `tests/src/consensus/sessions.rs`.

integration_tests::consensus_tests!(sessions:
    a_holder_whose_server_dies_keeps_its_lock,
    a_holder_cut_off_past_its_session_loses_the_lock,
    a_dropped_backend_frees_its_locks_at_once,
    a_release_lost_while_the_cluster_is_down_frees_the_lock_once_it_is_back,
);
