//! A chaos worker process (`integration_tests::chaos`), started by a chaos run with its plan
//! in `TOWER_LOCK_CHAOS_WORKER`.

fn main() {
    if !integration_tests::chaos::run_worker() {
        eprintln!(
            "chaos-worker runs under a chaos run (integration_tests::chaos::run), which passes its \
             plan in {}",
            integration_tests::chaos::WORKER_ENV
        );
        std::process::exit(2);
    }
}
