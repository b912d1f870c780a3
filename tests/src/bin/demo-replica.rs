//! The demo coupon service, built with the end-to-end tests so they can start its replicas as
//! real processes (Cargo builds a package's own binaries for its tests, not other packages').
//! Same code as `cargo run -p demo-coupon-service`.

fn main() -> std::process::ExitCode {
    demo_coupon_service::run_from_command_line()
}
