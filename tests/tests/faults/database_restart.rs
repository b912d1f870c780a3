//! A lock database killed under load and started again: while it is down every request is
//! answered 503 within the store timeout and no handler runs; once it is back the same app
//! (same backend, same pool) serves again, without restarting anything. On a PostgreSQL and a
//! MariaDB server of the test's own, killed with SIGKILL (a crash: the server recovers from its
//! log on restart).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::post;
use http::StatusCode;
use integration_tests::{MariadbServer, PostgresServer, post as post_request, send};
use tokio::time::{Instant, sleep};
use tower_lock::LockLayer;
use tower_lock::Locker;
use tower_lock::backend::LockBackend;
use tower_lock::backend::mysql::MysqlBackend;
use tower_lock::backend::postgres::PostgresBackend;
use tower_lock::key::KeyTemplate;

const STORE_TIMEOUT: Duration = Duration::from_secs(1);
/// Leases the crash left behind (their releases could not reach the database) run out after
/// this long.
const TTL: Duration = Duration::from_secs(2);
const CLIENTS: usize = 8;
/// How long the database stays down.
const OUTAGE: Duration = Duration::from_secs(3);
/// How long every client may take to be served again once the database is back: a left-over
/// lease's TTL, the pool's reconnection, and room for a slow machine.
const RECOVERY: Duration = Duration::from_secs(20);

/// A database server the test can crash and start again.
trait Restartable: Send + 'static {
    fn kill(&mut self);
    fn restart(&mut self);
}

impl Restartable for PostgresServer {
    fn kill(&mut self) {
        PostgresServer::kill(self);
    }
    fn restart(&mut self) {
        PostgresServer::restart(self);
    }
}

impl Restartable for MariadbServer {
    fn kill(&mut self) {
        MariadbServer::kill(self);
    }
    fn restart(&mut self) {
        MariadbServer::restart(self);
    }
}

/// One request a client sent.
#[derive(Clone, Copy, Debug)]
struct Sent {
    client: usize,
    started: Instant,
    took: Duration,
    status: StatusCode,
}

#[tokio::test]
async fn a_postgres_restart_under_load_is_503_within_the_store_timeout_then_serves_again() {
    let server = tokio::task::spawn_blocking(PostgresServer::start)
        .await
        .unwrap();
    let backend = PostgresBackend::connect(&server.url()).await.unwrap();
    restart_under_load(server, backend).await;
}

#[tokio::test]
async fn a_mariadb_restart_under_load_is_503_within_the_store_timeout_then_serves_again() {
    let server = tokio::task::spawn_blocking(MariadbServer::start)
        .await
        .unwrap();
    let backend = MysqlBackend::connect(&server.url()).await.unwrap();
    restart_under_load(server, backend).await;
}

async fn restart_under_load<S: Restartable, B: LockBackend>(server: S, backend: B) {
    let runs = Arc::new(AtomicUsize::new(0));
    let app = counting_app(backend, Arc::clone(&runs));
    let load = Load::start(&app);
    sleep(Duration::from_secs(1)).await;

    let server = blocking(server, S::kill).await;
    let killed = Instant::now();
    sleep(STORE_TIMEOUT).await;
    let runs_down = runs.load(Ordering::SeqCst);
    sleep(OUTAGE - STORE_TIMEOUT).await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        runs_down,
        "no handler ran while the database was down"
    );
    let restarting = Instant::now();
    let _server = blocking(server, S::restart).await;
    let restarted = Instant::now();
    let served_again = load.until_every_client_served_after(restarted).await;
    let sent = load.stop().await;

    let before: Vec<_> = sent.iter().filter(|s| s.started < killed).collect();
    assert!(
        before.iter().any(|s| s.status == StatusCode::OK),
        "served before the crash"
    );
    let down: Vec<_> = sent
        .iter()
        .filter(|s| s.started >= killed && s.started + s.took <= restarting)
        .collect();
    assert!(down.len() >= CLIENTS, "{} requests while down", down.len());
    for s in &down {
        assert_eq!(s.status, StatusCode::SERVICE_UNAVAILABLE, "{s:?}");
        assert!(
            s.took <= STORE_TIMEOUT + STORE_TIMEOUT / 2,
            "answered within the store timeout: {s:?}"
        );
    }
    assert!(
        served_again,
        "every client is served again within {RECOVERY:?} of the restart"
    );
}

/// Runs `change` on `server` off the runtime's threads (it waits for processes).
async fn blocking<S: Restartable>(mut server: S, change: fn(&mut S)) -> S {
    tokio::task::spawn_blocking(move || {
        change(&mut server);
        server
    })
    .await
    .expect("the server changed")
}

fn counting_app<B: LockBackend>(backend: B, runs: Arc<AtomicUsize>) -> Router {
    let layer = LockLayer::new(
        Locker::builder(backend)
            .ttl(TTL)
            .wait(Duration::from_secs(3))
            .store_timeout(STORE_TIMEOUT)
            .build()
            .unwrap(),
        KeyTemplate::parse("coupon:{path id}").unwrap(),
    );
    Router::new()
        .route(
            "/coupons/{id}/claim",
            post(move || async move { runs.fetch_add(1, Ordering::SeqCst).to_string() }),
        )
        .route_layer(layer)
}

/// Clients claiming a coupon each, one request after another, until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<Mutex<Vec<Sent>>>,
    clients: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(app: &Router) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(Mutex::new(Vec::new()));
        let clients = (0..CLIENTS)
            .map(|client| {
                let (app, stop, sent) = (app.clone(), Arc::clone(&stop), Arc::clone(&sent));
                tokio::spawn(async move {
                    let uri = format!("/coupons/{client}/claim");
                    while !stop.load(Ordering::SeqCst) {
                        let started = Instant::now();
                        let status = send(&app, post_request(&uri)).await.status;
                        sent.lock().unwrap().push(Sent {
                            client,
                            started,
                            took: started.elapsed(),
                            status,
                        });
                        sleep(Duration::from_millis(10)).await;
                    }
                })
            })
            .collect();
        Self {
            stop,
            sent,
            clients,
        }
    }

    /// Waits until every client had a request that started after `after` served, for at most
    /// [`RECOVERY`]; whether they all did.
    async fn until_every_client_served_after(&self, after: Instant) -> bool {
        while after.elapsed() < RECOVERY {
            if self.every_client_served_after(after) {
                return true;
            }
            sleep(Duration::from_millis(100)).await;
        }
        false
    }

    fn every_client_served_after(&self, after: Instant) -> bool {
        let sent = self.sent.lock().unwrap();
        (0..CLIENTS).all(|client| {
            sent.iter()
                .any(|s| s.client == client && s.started >= after && s.status == StatusCode::OK)
        })
    }

    async fn stop(self) -> Vec<Sent> {
        self.stop.store(true, Ordering::SeqCst);
        for client in self.clients {
            client.await.unwrap();
        }
        self.sent.lock().unwrap().clone()
    }
}
