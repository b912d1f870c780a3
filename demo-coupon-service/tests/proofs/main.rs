//! What the demo exists to prove, on real stores and across replica processes: claim storms
//! never oversell with the lock (and do without it), and a paused holder's write is refused by
//! the coupon store through its fencing token (and lands without it); claims through a lock
//! store's leader loss, and writers that keep their turns across replicas.

mod claim_storm;
mod coupon_proof;
mod fencing_proof;
mod leader_loss;
mod lock_store_down;
mod operator_release;
mod writer_turns;
