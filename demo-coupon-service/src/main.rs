//! Run with
//!
//! ```sh
//! cargo run -p demo-coupon-service                                  # embedded, no Redis
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p demo-coupon-service  # replicas share Redis
//! cargo run -p demo-coupon-service -- --help                        # every option
//! ```

fn main() -> std::process::ExitCode {
    demo_coupon_service::run_from_command_line()
}
