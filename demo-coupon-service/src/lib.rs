//! A coupon service that shows the overselling problem and tower-lock fixing it.
//!
//! `POST /coupons/{id}/claim` is ordinary, non-atomic business code (read the stock, check
//! the user, work, write). Without a lock, concurrent claims read the same stock and the
//! coupon is claimed more often than it has units; with the lock layer on that route (key
//! `coupon:{id}`), it never is — on one process, or across replicas sharing Redis, PostgreSQL
//! or MySQL/MariaDB, with the locks there or in any store tower-lock's URL API names (etcd,
//! ZooKeeper, RedLock, …).
//!
//! The files, by job: [`options`] (the command line), `wiring` (the stores the options name,
//! connected), [`locking`] (the locker, by the shapes its store has), `app` (the routes and
//! their lock layers), [`state`] (what the handlers share), `serving` (the program: connect,
//! listen, serve, shut down); the handlers in [`routes`], [`transfers`], [`optimistic`], the
//! coupons in [`store`].

pub mod admin;
mod app;
pub mod bodies;
pub mod dashboard;
pub mod locking;
pub mod optimistic;
pub mod options;
pub mod problem;
pub mod routes;
mod serving;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod transfers;
mod wiring;

pub use app::app;
pub use locking::Locking;
pub use options::{LockSettings, OnLostArg, Options};
pub use serving::{run_from_command_line, serve};
pub use state::AppState;
pub use wiring::redacted;
