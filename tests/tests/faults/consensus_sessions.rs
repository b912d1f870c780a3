//! The session behind every etcd and ZooKeeper lock: a holder whose server dies keeps its
//! locks on another within its session; a holder cut off from the cluster past its session
//! loses its locks (it is told so by its deadline, another process takes them with a larger
//! fence); a backend that is dropped frees its locks at once. The scenarios are in
//! `tests/src/consensus/sessions.rs`.

integration_tests::consensus_tests!(sessions:
    a_holder_whose_server_dies_keeps_its_lock,
    a_holder_cut_off_past_its_session_loses_the_lock,
    a_dropped_backend_frees_its_locks_at_once,
);
