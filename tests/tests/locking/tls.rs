//! Locks over TLS, as managed stores require: each server here takes TLS connections only,
//! with a certificate for `127.0.0.1` signed by a certificate authority the test made, and the
//! store URL names that CA (`tls_ca=`, `sslrootcert=`, `ssl-ca=`). Each twin leaves the CA out:
//! the system's trusted roots do not know it, so the server is refused.

use integration_tests::{MariadbServer, PostgresServer, RedisServer};
use tower_lock::Locker;
use tower_lock::backend::any::AnyBackend;

/// A lock taken and given back through the store `url` names.
async fn locks_through(url: &str) {
    let backend = (AnyBackend::connect(url).await).unwrap_or_else(|error| panic!("{url}: {error}"));
    let locker = Locker::new(backend);
    let held = locker.lock("coupon:42").await.expect("the lock is taken");
    assert!(held.fence().is_some(), "the store fences its grants");
    held.release().await.expect("the lock is given back");
}

/// Why the store `url` names was refused.
async fn refused(url: &str) -> String {
    match AnyBackend::connect(url).await {
        Ok(backend) => panic!("{url} connected: {backend:?}"),
        Err(error) => error.to_string(),
    }
}

#[tokio::test]
async fn redis_over_tls_trusts_the_ca_its_url_names() {
    let redis = RedisServer::start_tls();
    let ca = redis.tls_files().ca.display();
    locks_through(&format!("{}?tls_ca={ca}", redis.url())).await;
}

#[tokio::test]
async fn redis_over_tls_refuses_a_server_signed_by_a_ca_it_was_not_given() {
    let redis = RedisServer::start_tls();
    let error = refused(&redis.url()).await;
    assert!(error.contains("certificate"), "{error}");
    assert!(error.contains(&redis.port().to_string()), "{error}");
}

#[tokio::test]
async fn a_tls_ca_that_cannot_be_read_is_named() {
    let error = refused("rediss://127.0.0.1:1?tls_ca=/nonexistent/ca.pem").await;
    assert!(
        error.contains("tls_ca=/nonexistent/ca.pem: No such file"),
        "{error}"
    );
}

#[tokio::test]
async fn postgres_over_tls_verifies_the_server_with_the_ca_its_url_names() {
    let postgres = PostgresServer::start_tls();
    let ca = postgres.tls_files().ca.display();
    locks_through(&format!(
        "{}?sslmode=verify-full&sslrootcert={ca}",
        postgres.url()
    ))
    .await;
}

#[tokio::test]
async fn postgres_over_tls_refuses_a_server_signed_by_a_ca_it_was_not_given() {
    let postgres = PostgresServer::start_tls();
    let error = refused(&format!("{}?sslmode=verify-full", postgres.url())).await;
    assert!(error.contains("certificate"), "{error}");
    let error = refused(&format!("{}?sslmode=disable", postgres.url())).await;
    assert!(
        error.contains("no encryption"),
        "the server takes TLS only: {error}"
    );
}

#[tokio::test]
async fn mysql_over_tls_verifies_the_server_with_the_ca_its_url_names() {
    let mariadb = MariadbServer::start_tls();
    let ca = mariadb.tls_files().ca.display();
    locks_through(&format!(
        "{}?ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}",
        mariadb.url()
    ))
    .await;
}

#[tokio::test]
async fn mysql_over_tls_refuses_a_server_signed_by_a_ca_it_was_not_given() {
    let mariadb = MariadbServer::start_tls();
    let error = refused(&format!("{}?ssl-mode=VERIFY_IDENTITY", mariadb.url())).await;
    assert!(error.contains("certificate"), "{error}");
    let error = refused(&format!("{}?ssl-mode=DISABLED", mariadb.url())).await;
    assert!(
        error.contains("Access denied"),
        "the server takes TLS only: {error}"
    );
}
