//! Serving connections: hyper's HTTP/1 server, with a deadline on reading a request's head and
//! on each wait for its body, so that a slow or stalled client cannot keep a connection open
//! for good, and a graceful shutdown that lets in-flight requests finish.

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

/// How long a client may take to send a request's head (its final blank line included), and
/// how long it may leave its body waiting for the next bytes. Past the first the connection is
/// closed; past the second the request is answered 400 and the connection closed.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `shutdown` completes, then waits for the connections'
/// requests in flight to finish.
pub(crate) async fn serve(listener: TcpListener, app: Router, shutdown: impl Future<Output = ()>) {
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
