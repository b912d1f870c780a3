//! A waiter on etcd or ZooKeeper is woken by its watch, not by polling: while it waits behind a
//! held lock, it sends the cluster nothing but its session's heartbeats (counted by the server
//! itself); the same waiter in polling mode keeps asking. The scenarios are in
//! `tests/src/consensus/waiting.rs`.

integration_tests::consensus_tests!(waiting:
    a_notified_waiter_asks_nothing_while_it_waits,
    a_fair_waiter_asks_nothing_while_it_waits,
    a_polling_waiter_keeps_asking,
);
