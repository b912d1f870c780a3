//! [`AnyBackend::connect`]: the store a URL names, connected.

use super::mutex_store::{AnyMutexBackend, MutexStore};
use super::store::{AnyBackend, Store};
use super::url_parts::{Parts, malformed};
use crate::backend::BackendError;
use crate::backend::memory::MemoryBackend;

/// Why [`AnyBackend::connect`] gave no backend. Its message never shows a password.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreUrlError {
    /// The URL names no store this crate knows, or says something the store cannot take.
    #[error("lock store URL {url}: {why}")]
    Malformed {
        /// The URL, its password masked.
        url: String,
        /// What is wrong, and what would be right.
        why: String,
    },
    /// The store's cargo feature is not built.
    #[error("lock store URL {url}: {scheme}:// needs tower-lock's `{feature}` feature")]
    NotBuilt {
        /// The URL, its password masked.
        url: String,
        /// The URL's scheme.
        scheme: String,
        /// The feature to enable.
        feature: &'static str,
    },
    /// The store could not be reached: the message names what was tried (`cannot connect to
    /// Redis at 10.0.0.5:6379: Connection refused`).
    #[error("{}", .0.reason())]
    Unreachable(#[from] BackendError),
}

/// The schemes [`AnyBackend::connect`] knows, for the message that names them.
pub(super) const SCHEMES: &str = "memory://, redis://, rediss://, redis+cluster://, redis+sentinel://, postgres://, \
                       mysql://, etcd://, zk://";

impl AnyBackend {
    /// Connects to the store `url` names, with the store's defaults:
    ///
    /// | URL | store |
    /// |---|---|
    /// | `memory://` | a new [`MemoryBackend`]: one process only |
    /// | `redis://[:password@]host:port[/db]` | [`RedisBackend::connect`](crate::RedisBackend::connect) |
    /// | `rediss://…[?tls_ca=<path>]` | the same over TLS (the `tls` feature), the server verified with the system's trusted roots, or with the PEM CA certificate at `tls_ca` |
    /// | `redis+cluster://[:password@]host:port[,host:port…]` | a Redis Cluster through any of its nodes |
    /// | `redis+sentinel://host:port[,host:port…]/<master>[?wait=<n>]` | the master the Sentinels name; `wait`: replicas that must acknowledge each lock within 100 ms |
    /// | `postgres://…[?lock_table=<name>]` | PostgreSQL lease rows (in `lock_table`, default `tower_lock_leases`) |
    /// | `mysql://…[?lock_table=<name>]` | MySQL or MariaDB lease rows |
    /// | `etcd://host:port[,host:port…][?namespace=<prefix>&session_ms=<ms>]` | an etcd cluster's members |
    /// | `zk://host:port[,host:port…][?root=<path>&session_ms=<ms>]` | a ZooKeeper ensemble's servers |
    ///
    /// PostgreSQL and MySQL take their own options too, TLS among them (`sslmode=verify-full&
    /// sslrootcert=<path>`, `ssl-mode=VERIFY_IDENTITY&ssl-ca=<path>`; the `tls` feature). An
    /// option that neither tower-lock nor the store's client reads is refused, naming both lists
    /// (a misspelt `lock_table` would otherwise leave the default table in use), as is a port
    /// past 65535; the scheme is case-insensitive.
    ///
    /// `session_ms` (etcd and ZooKeeper, default 15 000): how long a crashed holder keeps its
    /// locks; lockers may lease two thirds of it.
    ///
    /// Every other setting (TTL, waiting, fairness) belongs to the
    /// [`LockerBuilder`](crate::LockerBuilder). A store whose feature is not built answers
    /// [`StoreUrlError::NotBuilt`], naming the feature; the mutex-only modes (`redlock://`,
    /// PostgreSQL's advisory locks, MySQL's `NOWAIT`) are refused, since an `AnyBackend` serves
    /// every lock shape: [`AnyMutexBackend::connect`] takes them.
    ///
    /// # Errors
    ///
    /// [`StoreUrlError`]: what is wrong with the URL, or the store's failure to connect (within
    /// 5 s, naming what it could not reach).
    pub async fn connect(url: &str) -> Result<Self, StoreUrlError> {
        let parts = Parts::of(url)?;
        Ok(Self::on(parts.connect().await?))
    }
}

impl AnyMutexBackend {
    /// Connects to the store `url` names, for mutexes: every URL
    /// [`AnyBackend::connect`] takes, and the stores with mutexes only:
    ///
    /// | URL | store |
    /// |---|---|
    /// | `redlock://host:port,host:port,host:port` | RedLock over independent Redis masters, a majority of which must answer now |
    /// | `postgres://…?mode=advisory[&namespace=<name>]` | PostgreSQL advisory locks (in `namespace`, default `tower_lock`) |
    /// | `mysql://…?mode=nowait[&lock_table=<name>]` | rows of `lock_table` (default `tower_lock_rows`) held `FOR UPDATE NOWAIT` |
    ///
    /// # Errors
    ///
    /// [`StoreUrlError`], as for [`AnyBackend::connect`].
    pub async fn connect(url: &str) -> Result<Self, StoreUrlError> {
        let parts = Parts::of(url)?;
        Ok(Self::on(parts.connect_mutex().await?))
    }
}

impl Parts<'_> {
    async fn connect(&self) -> Result<Store, StoreUrlError> {
        match self.scheme.as_str() {
            "memory" => {
                self.option("", &[])?;
                Ok(Store::Memory(MemoryBackend::new()))
            }
            "redis" | "rediss" => self.redis().await,
            "redis+cluster" => self.redis_cluster().await,
            "redis+sentinel" => self.redis_sentinel().await,
            "postgres" | "postgresql" => self.postgres().await,
            "mysql" | "mariadb" => self.mysql().await,
            "etcd" => self.etcd().await,
            "zk" | "zookeeper" => self.zookeeper().await,
            "redlock" => Err(malformed(
                self.url,
                "RedLock has mutexes only, and an AnyBackend serves every lock shape: connect \
                 with AnyMutexBackend"
                    .into(),
            )),
            other => Err(malformed(
                self.url,
                format!("unknown scheme {other}://; the known ones: {SCHEMES}"),
            )),
        }
    }

    /// The store of an [`AnyMutexBackend`].
    async fn connect_mutex(&self) -> Result<MutexStore, StoreUrlError> {
        match (self.scheme.as_str(), self.mode()) {
            ("redlock", _) => self.redlock().await,
            ("postgres" | "postgresql", Some("advisory")) => self.advisory().await,
            ("mysql" | "mariadb", Some("nowait")) => self.nowait().await,
            _ => Ok(MutexStore::Any(AnyBackend::on(self.connect().await?))),
        }
    }

    #[cfg(not(feature = "redis"))]
    async fn redlock(&self) -> Result<MutexStore, StoreUrlError> {
        Err(self.needs("redis"))
    }

    #[cfg(feature = "redis")]
    async fn redlock(&self) -> Result<MutexStore, StoreUrlError> {
        use crate::backend::redis::RedlockBackend;
        self.option("", &[])?;
        let masters = self.required_hosts("the masters")?;
        if masters.len() < 3 {
            let why = format!(
                "RedLock needs three masters or more, and names {}: with fewer, the loss of \
                 any one leaves no majority to grant a lock (a single Redis is redis://)",
                masters.len()
            );
            return Err(malformed(self.url, why));
        }
        let urls: Vec<String> = masters
            .iter()
            .map(|master| format!("redis://{master}"))
            .collect();
        let backend = RedlockBackend::connect(urls)
            .map_err(|error| malformed(self.url, error.to_string()))?;
        backend
            .check_quorum(std::time::Duration::from_secs(1))
            .await?;
        Ok(MutexStore::Redlock(backend))
    }

    #[cfg(not(feature = "postgres"))]
    async fn advisory(&self) -> Result<MutexStore, StoreUrlError> {
        Err(self.needs("postgres"))
    }

    #[cfg(feature = "postgres")]
    async fn advisory(&self) -> Result<MutexStore, StoreUrlError> {
        use crate::backend::postgres::{AdvisoryBackend, DEFAULT_NAMESPACE};
        let (url, namespace) = self.database_url("namespace", DEFAULT_NAMESPACE)?;
        let pool = crate::backend::sql::connect_pool(&url, 16).await?;
        Ok(MutexStore::Advisory(AdvisoryBackend::with_pool(
            pool, &namespace,
        )))
    }

    #[cfg(not(feature = "mysql"))]
    async fn nowait(&self) -> Result<MutexStore, StoreUrlError> {
        Err(self.needs("mysql"))
    }

    #[cfg(feature = "mysql")]
    async fn nowait(&self) -> Result<MutexStore, StoreUrlError> {
        use crate::backend::mysql::{DEFAULT_ROW_TABLE, NowaitBackend};
        let (url, table) = self.database_url("lock_table", DEFAULT_ROW_TABLE)?;
        let pool = crate::backend::sql::connect_pool(&url, 16).await?;
        Ok(MutexStore::Nowait(
            NowaitBackend::with_table(pool, &table).await?,
        ))
    }

    #[cfg(not(feature = "redis"))]
    async fn redis(&self) -> Result<Store, StoreUrlError> {
        Err(self.needs("redis"))
    }

    #[cfg(feature = "redis")]
    async fn redis(&self) -> Result<Store, StoreUrlError> {
        let address = self.redis_address()?;
        let backend = crate::backend::redis::RedisBackend::connect(address).await;
        Ok(Store::Redis(backend.map_err(redis_failure)?))
    }

    #[cfg(not(feature = "redis-cluster"))]
    async fn redis_cluster(&self) -> Result<Store, StoreUrlError> {
        Err(self.needs("redis-cluster"))
    }

    #[cfg(feature = "redis-cluster")]
    async fn redis_cluster(&self) -> Result<Store, StoreUrlError> {
        self.option("", &[])?;
        let (credentials, hosts) = match self.rest().rsplit_once('@') {
            Some((credentials, hosts)) => (format!("{credentials}@"), hosts),
            None => (String::new(), self.rest()),
        };
        let nodes: Vec<String> = (hosts.trim_end_matches('/').split(','))
            .filter(|host| !host.is_empty())
            .map(|host| format!("redis://{credentials}{host}"))
            .collect();
        if nodes.is_empty() {
            return Err(malformed(
                self.url,
                "name the cluster's nodes, host:port,…".into(),
            ));
        }
        let backend = crate::backend::redis::RedisBackend::connect_cluster(nodes).await;
        Ok(Store::RedisCluster(backend.map_err(redis_failure)?))
    }

    #[cfg(not(feature = "redis-sentinel"))]
    async fn redis_sentinel(&self) -> Result<Store, StoreUrlError> {
        Err(self.needs("redis-sentinel"))
    }

    #[cfg(feature = "redis-sentinel")]
    async fn redis_sentinel(&self) -> Result<Store, StoreUrlError> {
        let wait = match self.option("wait", &["wait"])? {
            None => None,
            Some(replicas) => Some(replicas.parse::<u32>().map_err(|_| {
                malformed(self.url, format!("wait={replicas}: a number of replicas"))
            })?),
        };
        let (sentinels, master) = self.hosts_and_path();
        let (false, Some(master)) = (sentinels.is_empty(), master) else {
            let why = "name the Sentinels and the master: host:port,…/<master>".into();
            return Err(malformed(self.url, why));
        };
        let sentinels: Vec<String> = sentinels
            .iter()
            .map(|host| format!("redis://{host}"))
            .collect();
        let backend =
            crate::backend::redis::RedisBackend::connect_sentinel(sentinels, master).await;
        let backend = backend.map_err(redis_failure)?;
        Ok(Store::RedisSentinel(match wait {
            Some(replicas) => backend.replica_acks(replicas, std::time::Duration::from_millis(100)),
            None => backend,
        }))
    }

    #[cfg(not(feature = "postgres"))]
    async fn postgres(&self) -> Result<Store, StoreUrlError> {
        Err(self.needs("postgres"))
    }

    #[cfg(feature = "postgres")]
    async fn postgres(&self) -> Result<Store, StoreUrlError> {
        use crate::backend::postgres::{DEFAULT_TABLE, PostgresBackend};
        self.every_shape()?;
        let (url, table) = self.database_url("lock_table", DEFAULT_TABLE)?;
        Ok(Store::Postgres(
            PostgresBackend::connect_to_table(&url, &table).await?,
        ))
    }

    #[cfg(not(feature = "mysql"))]
    async fn mysql(&self) -> Result<Store, StoreUrlError> {
        Err(self.needs("mysql"))
    }

    #[cfg(feature = "mysql")]
    async fn mysql(&self) -> Result<Store, StoreUrlError> {
        use crate::backend::mysql::{DEFAULT_TABLE, MysqlBackend};
        self.every_shape()?;
        let (url, table) = self.database_url("lock_table", DEFAULT_TABLE)?;
        let url = url.replacen("mariadb://", "mysql://", 1);
        Ok(Store::Mysql(
            MysqlBackend::connect_to_table(&url, &table).await?,
        ))
    }

    #[cfg(not(feature = "etcd"))]
    async fn etcd(&self) -> Result<Store, StoreUrlError> {
        Err(self.needs("etcd"))
    }

    #[cfg(feature = "etcd")]
    async fn etcd(&self) -> Result<Store, StoreUrlError> {
        use crate::backend::etcd::{EtcdBackend, EtcdSettings};
        const KNOWN: &[&str] = &["namespace", "session_ms"];
        let mut settings = EtcdSettings::default();
        if let Some(namespace) = self.option("namespace", KNOWN)? {
            settings = settings.namespace(namespace);
        }
        if let Some(session) = self.millis("session_ms", KNOWN)? {
            settings = settings.session_ttl(session);
        }
        let members = self.required_hosts("the cluster's members")?;
        let endpoints: Vec<String> = members
            .iter()
            .map(|member| format!("http://{member}"))
            .collect();
        Ok(Store::Etcd(
            EtcdBackend::connect_with(endpoints, settings).await?,
        ))
    }

    #[cfg(not(feature = "zookeeper"))]
    async fn zookeeper(&self) -> Result<Store, StoreUrlError> {
        Err(self.needs("zookeeper"))
    }

    #[cfg(feature = "zookeeper")]
    async fn zookeeper(&self) -> Result<Store, StoreUrlError> {
        use crate::backend::zookeeper::{ZookeeperBackend, ZookeeperSettings};
        const KNOWN: &[&str] = &["root", "session_ms"];
        let mut settings = ZookeeperSettings::default();
        if let Some(root) = self.option("root", KNOWN)? {
            settings = settings.root(root);
        }
        if let Some(session) = self.millis("session_ms", KNOWN)? {
            settings = settings.session_timeout(session);
        }
        let servers = self.required_hosts("the ensemble's servers")?;
        let backend = ZookeeperBackend::connect_with(&servers.join(","), settings).await?;
        Ok(Store::Zookeeper(backend))
    }
}

/// A Redis connect's failure, by what it names (`cannot connect to Redis at …`) when it names
/// something.
#[cfg(feature = "redis")]
fn redis_failure(error: redis::RedisError) -> BackendError {
    BackendError::new(
        error
            .detail()
            .map_or_else(|| error.to_string(), str::to_owned),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::LockBackend;

    async fn refused(url: &str) -> String {
        match AnyBackend::connect(url).await {
            Ok(backend) => panic!("{url} gave {backend:?}"),
            Err(error) => error.to_string(),
        }
    }

    #[tokio::test]
    async fn memory_is_a_store_of_its_own() {
        let backend = AnyBackend::connect("memory://").await.unwrap();
        assert_eq!(backend.store_kind(), "memory");
    }

    #[tokio::test]
    async fn an_unknown_scheme_is_told_the_known_ones() {
        let error = refused("mongodb://u:s3cret@db/x").await;
        assert!(error.contains("unknown scheme mongodb://"), "{error}");
        assert!(error.contains(SCHEMES), "{error}");
        assert!(!error.contains("s3cret"), "{error}");
        assert!(refused("127.0.0.1:6379").await.contains("no scheme"));
    }

    #[tokio::test]
    async fn mutex_only_stores_are_refused_naming_their_own_backends() {
        let error = refused("redlock://a:1,b:1,c:1").await;
        assert!(error.contains("connect with AnyMutexBackend"), "{error}");
        if cfg!(feature = "postgres") {
            let error = refused("postgres://root@127.0.0.1:1/test?mode=advisory").await;
            assert!(error.contains("connect with AnyMutexBackend"), "{error}");
        }
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn redlock_without_a_majority_is_refused_naming_the_masters() {
        let error =
            match AnyMutexBackend::connect("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3").await {
                Ok(backend) => panic!("connected to {backend:?}"),
                Err(error) => error.to_string(),
            };
        assert!(
            error.contains("2 of 3 masters must answer; 3 did not"),
            "{error}"
        );
        assert!(error.contains("127.0.0.1:2"), "{error}");
    }

    /// A port past 65535 is named as what is wrong, for any store; a port in range gets past
    /// the URL to the connect (nothing listens on port 1).
    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn a_port_out_of_range_is_named() {
        let error = refused("redis://127.0.0.1:99999").await;
        assert!(
            error.contains("port 99999 of 127.0.0.1:99999 is not a port"),
            "{error}"
        );
        let error = refused("etcd://127.0.0.1:2379,127.0.0.1:70000").await;
        assert!(error.contains("port 70000"), "{error}");
        let error = refused("redis://127.0.0.1:1").await;
        assert!(error.contains("cannot connect"), "{error}");
    }

    /// Schemes are case-insensitive (RFC 3986 §3.1): `REDIS://` is `redis://`.
    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn an_upper_case_scheme_is_the_same_scheme() {
        for url in [
            "REDIS://127.0.0.1:1",
            "Redis://127.0.0.1:1",
            "redis://127.0.0.1:1",
        ] {
            let error = refused(url).await;
            assert!(error.contains("cannot connect to Redis"), "{url}: {error}");
        }
        assert!(AnyBackend::connect("MEMORY://").await.is_ok());
    }

    /// RedLock over fewer than three masters is refused, saying why (three get past the URL
    /// to the quorum check: `redlock_without_a_majority_is_refused_naming_the_masters`).
    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn redlock_over_fewer_than_three_masters_is_refused() {
        for masters in ["127.0.0.1:1", "127.0.0.1:1,127.0.0.1:2"] {
            let error = match AnyMutexBackend::connect(&format!("redlock://{masters}")).await {
                Ok(backend) => panic!("connected to {backend:?}"),
                Err(error) => error.to_string(),
            };
            assert!(error.contains("needs three masters or more"), "{error}");
        }
    }

    #[tokio::test]
    async fn an_option_the_store_does_not_take_is_named() {
        let error = refused("memory://?ttl=5").await;
        assert!(error.contains("takes no option `ttl`"), "{error}");
    }

    /// A misspelt option of a SQL store is refused, naming the options tower-lock and the
    /// database's client take; the same URL spelt right gets past the check, to the connect
    /// (refused here: nothing listens on port 1).
    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn a_sql_option_neither_we_nor_the_client_take_is_named() {
        for scheme in ["postgres", "mysql"] {
            if scheme == "mysql" && !cfg!(feature = "mysql") {
                continue;
            }
            let error = refused(&format!("{scheme}://u:s3cret@127.0.0.1:1/db?lock_tabel=x")).await;
            assert!(error.contains("takes no option `lock_tabel`"), "{error}");
            assert!(error.contains("tower-lock's: lock_table, mode"), "{error}");
            assert!(error.contains("sslmode"), "{error}");
            assert!(!error.contains("s3cret"), "{error}");

            let url = format!("{scheme}://u:s3cret@127.0.0.1:1/db?lock_table=x");
            let error = refused(&url).await;
            assert!(error.contains("cannot connect"), "{error}");
            assert!(!error.contains("takes no option"), "{error}");
        }
    }

    #[cfg(feature = "etcd")]
    #[tokio::test]
    async fn a_session_that_is_not_milliseconds_is_named() {
        let error = refused("etcd://127.0.0.1:1?session_ms=soon").await;
        assert!(
            error.contains("session_ms=soon: a number of milliseconds"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn the_chosen_stores_own_backend_is_reachable_by_its_type() {
        let backend = AnyBackend::connect("memory://").await.unwrap();
        assert!(backend.downcast_ref::<MemoryBackend>().is_some());
        assert!(backend.downcast_ref::<String>().is_none());
    }

    #[tokio::test]
    async fn a_mutex_backend_gives_every_shape_back_where_its_store_has_them() {
        let backend = AnyMutexBackend::connect("memory://").await.unwrap();
        assert!(AnyBackend::try_from(backend).is_ok());
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn redlock_stays_a_mutex_backend() {
        let masters = ["a", "b", "c"].map(|host| format!("redis://{host}:1"));
        let redlock = crate::backend::redis::RedlockBackend::connect(masters).unwrap();
        let backend = AnyMutexBackend::from(redlock);
        let refused = AnyBackend::try_from(backend).unwrap_err();
        assert_eq!(refused.store_kind(), "redlock");
    }

    #[cfg(all(feature = "redis", not(feature = "tls")))]
    #[tokio::test]
    async fn tls_not_built_is_named() {
        let error = refused("rediss://127.0.0.1:6380").await;
        assert!(
            error.contains("rediss:// needs tower-lock's `tls` feature"),
            "{error}"
        );
    }

    #[cfg(not(feature = "etcd"))]
    #[tokio::test]
    async fn a_store_not_built_names_its_feature() {
        let error = refused("etcd://127.0.0.1:2379").await;
        assert!(
            error.contains("needs tower-lock's `etcd` feature"),
            "{error}"
        );
    }
}
