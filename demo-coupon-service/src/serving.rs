//! Serving: the options read, the stores connected, then hyper's HTTP/1 server, with a
//! deadline on reading a request's head and on each wait for its body, so that a slow or
//! stalled client cannot keep a connection open for good, and a graceful shutdown that lets
//! in-flight requests finish.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceBuilder;
use tower_http::timeout::RequestBodyTimeoutLayer;

use crate::app::app;
use crate::locking::Locking;
use crate::options::Options;
use crate::state::AppState;
use crate::wiring::redacted;
use crate::{dashboard, telemetry};

/// How long a client may take to send a request's head (its final blank line included), and
/// how long it may leave its body waiting for the next bytes. Past the first the connection is
/// closed; past the second the request is answered 400 and the connection closed.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `shutdown` completes, then waits for the connections'
/// requests in flight to finish.
async fn serve_connections(listener: TcpListener, app: Router, shutdown: impl Future<Output = ()>) {
    let app = ServiceBuilder::new()
        .layer(RequestBodyTimeoutLayer::new(READ_TIMEOUT))
        .service(app);
    let connections = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of file descriptors, say: wait a little rather than spin.
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(READ_TIMEOUT)
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let connection = connections.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection closed");
            }
        });
    }
    drop(listener);
    connections.shutdown().await;
}

/// Serves until SIGTERM or Ctrl-C, then lets in-flight requests finish (and release their
/// locks) before returning.
pub async fn serve(options: Options) -> Result<(), Box<dyn std::error::Error>> {
    let state = AppState::from_options(&options)
        .await?
        .with_metrics(telemetry::prometheus());
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|error| format!("cannot listen on {}: {error}", options.listen))?;
    let address = listener.local_addr()?;
    dashboard::spawn_reporter(state.clone(), address.to_string());
    let store = match options.store_url() {
        Some(url) => format!("{} (shared by replicas)", redacted(url)),
        None if options.lock_store.is_some() => {
            "embedded in-process store (one process only; set STORE for replicas)".to_owned()
        }
        None => {
            "embedded in-process store and MemoryBackend (one process only; set STORE for replicas)"
                .to_owned()
        }
    };
    let locking = if options.no_lock {
        "OFF (--no-lock: claims will oversell)".to_owned()
    } else if options.optimistic {
        "OFF (--optimistic: claims and transfers retry on a version check)".to_owned()
    } else if let Some(lock_store) = &options.lock_store {
        format!(
            "on, in {} (writes fenced by the coupon store)",
            redacted(lock_store)
        )
    } else {
        "on".to_owned()
    };
    tracing::info!(
        %address,
        dashboard = %format_args!("http://{address}/"),
        store,
        locking,
        work_ms = options.work_ms,
        lock_wait_ms = options.lock_wait_ms,
        lock_ttl_ms = lease_ttl(&state.locking, options.lock_ttl_ms),
        lock_local_run = options.lock_local_run,
        audit_permits = options.audit_permits,
        renew = !options.no_renew,
        on_lost = ?options.on_lost,
        fenced_writes = !options.no_fence,
        "coupon service listening"
    );
    serve_connections(listener, app(state), shutdown_signal()).await;
    tracing::info!("stopped; in-flight claims finished");
    Ok(())
}

/// The whole program behind the `demo-coupon-service` binary: logs (`RUST_LOG`, default
/// `info`; coloured only on a terminal), options from the command line and environment, then
/// [`serve`]. A failure to start is one line on stderr, naming what failed, and exit code 1.
pub fn run_from_command_line() -> std::process::ExitCode {
    use clap::Parser;
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;

    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let options = Options::parse();
    let served = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the runtime: {error}").into())
        .and_then(|runtime| runtime.block_on(serve(options)));
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("demo-coupon-service: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The lease TTL unless `--lock-ttl-ms` says otherwise (the locker's default).
const DEFAULT_LOCK_TTL: Duration = Duration::from_secs(10);

/// The lease TTL locks are taken with, for the start-up log: the one asked for, or the
/// default, said to be shortened where the lock store vouches for less.
fn lease_ttl(locking: &Locking, asked_ms: Option<u64>) -> String {
    match (locking.ttl(), asked_ms) {
        (None, _) => "none (no locks)".to_owned(),
        (Some(ttl), Some(_)) => ttl.as_millis().to_string(),
        (Some(ttl), None) if ttl < DEFAULT_LOCK_TTL => format!(
            "{} (the longest the lock store vouches for, below the default {})",
            ttl.as_millis(),
            DEFAULT_LOCK_TTL.as_millis()
        ),
        (Some(ttl), None) => ttl.as_millis().to_string(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate.recv() => {}
    }
    tracing::info!("shutting down: finishing in-flight requests");
}
