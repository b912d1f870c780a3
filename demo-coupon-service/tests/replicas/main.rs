//! The demo as its users meet it, run as real processes: start-up and its refusals, audits
//! under a semaphore, transfers, metrics, graceful shutdown, slow clients, and the dashboard across replicas
//! and in a browser.

mod audits;
mod dashboard_browser;
mod dashboard_replicas;
mod metrics;
mod shutdown;
mod slow_clients;
mod startup;
mod transfers;
