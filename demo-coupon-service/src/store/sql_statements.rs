//! The coupon store's SQL, once per dialect: PostgreSQL's and MySQL/MariaDB's.

use std::sync::LazyLock;

/// Which SQL the store speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL: `$1` parameters, `ON CONFLICT`.
    Postgres,
    /// MySQL and MariaDB: `?` parameters, `ON DUPLICATE KEY UPDATE`.
    Mysql,
}

impl Dialect {
    /// The dialect of the store at `url`: `None` for Redis's schemes.
    ///
    /// # Errors
    ///
    /// A message naming the schemes a coupon store may have, for any other.
    pub fn of_url(url: &str) -> Result<Option<Self>, String> {
        let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
        match scheme.to_ascii_lowercase().as_str() {
            "memory" | "redis" | "rediss" | "redis+cluster" | "redis+sentinel" => Ok(None),
            "postgres" | "postgresql" => Ok(Some(Self::Postgres)),
            "mysql" | "mariadb" => Ok(Some(Self::Mysql)),
            _ => Err(format!(
                "--store {}: the URL must start with memory://, redis://, rediss://, \
                 redis+cluster://, redis+sentinel://, postgres:// or mysql://",
                crate::wiring::redacted(url)
            )),
        }
    }

    /// The database's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Postgres => "PostgreSQL",
            Self::Mysql => "MySQL",
        }
    }

    /// The store's statements in this dialect.
    pub(super) fn statements(self) -> &'static Statements {
        match self {
            Self::Postgres => &POSTGRES,
            Self::Mysql => &MYSQL,
        }
    }
}

/// The store's statements in one dialect.
#[derive(Debug)]
pub(super) struct Statements {
    pub(super) create: Vec<&'static str>,
    pub(super) upsert_coupon: String,
    pub(super) delete_claims: String,
    pub(super) stock: String,
    pub(super) register_fence: String,
    pub(super) claims_of_user: String,
    pub(super) write_fenced: String,
    pub(super) write_unfenced: String,
    pub(super) versioned_stock: String,
    pub(super) write_at_version: String,
    pub(super) set_stock_at_version: String,
    pub(super) insert_claim: String,
    pub(super) set_stock: String,
    pub(super) add_audits: String,
    pub(super) audits: String,
    pub(super) claims: String,
    pub(super) repeated_users: String,
    pub(super) publish_report: String,
    pub(super) reports: String,
    pub(super) forget_report: String,
    pub(super) coupon_ids: String,
}

impl Statements {
    /// The statements in `dialect`. Each is written once with PostgreSQL's `$n` parameters,
    /// every one used once and in order, so that MySQL's `?` take the same binds.
    fn new(dialect: Dialect) -> Self {
        let sql = |statement: &str| match dialect {
            Dialect::Postgres => statement.to_owned(),
            Dialect::Mysql => question_marks(statement),
        };
        let (create, upsert_coupon, add_audits, publish_report) = match dialect {
            Dialect::Postgres => (
                vec![
                    "CREATE TABLE IF NOT EXISTS coupons (id text PRIMARY KEY, \
                     supply bigint NOT NULL, remaining bigint NOT NULL, \
                     last_fence bigint NOT NULL DEFAULT 0, version bigint NOT NULL DEFAULT 0)",
                    "CREATE TABLE IF NOT EXISTS claims (id bigserial PRIMARY KEY, \
                     coupon_id text NOT NULL, user_id text NOT NULL)",
                    "CREATE INDEX IF NOT EXISTS claims_by_coupon_and_user \
                     ON claims (coupon_id, user_id)",
                    "CREATE TABLE IF NOT EXISTS demo_counters \
                     (name text PRIMARY KEY, value bigint NOT NULL)",
                    "CREATE TABLE IF NOT EXISTS demo_replicas \
                     (replica text PRIMARY KEY, report text NOT NULL)",
                ],
                "INSERT INTO coupons (id, supply, remaining) VALUES ($1, $2, $3) \
                 ON CONFLICT (id) DO UPDATE SET supply = excluded.supply, \
                    remaining = excluded.remaining, version = coupons.version + 1",
                "INSERT INTO demo_counters (name, value) VALUES ('audits', $1) \
                 ON CONFLICT (name) DO UPDATE SET value = demo_counters.value + excluded.value",
                "INSERT INTO demo_replicas (replica, report) VALUES ($1, $2) \
                 ON CONFLICT (replica) DO UPDATE SET report = excluded.report",
            ),
            // Binary ids: MySQL's default collation would take `C1` and `c1` for one coupon.
            Dialect::Mysql => (
                vec![
                    "CREATE TABLE IF NOT EXISTS coupons (id VARBINARY(64) PRIMARY KEY, \
                     supply BIGINT NOT NULL, remaining BIGINT NOT NULL, \
                     last_fence BIGINT NOT NULL DEFAULT 0, version BIGINT NOT NULL DEFAULT 0) \
                     ENGINE = InnoDB",
                    "CREATE TABLE IF NOT EXISTS claims (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
                     coupon_id VARBINARY(64) NOT NULL, user_id VARBINARY(512) NOT NULL, \
                     INDEX claims_by_coupon_and_user (coupon_id, user_id)) ENGINE = InnoDB",
                    "CREATE TABLE IF NOT EXISTS demo_counters \
                     (name VARBINARY(64) PRIMARY KEY, value BIGINT NOT NULL) ENGINE = InnoDB",
                    // VARCHAR, not TEXT: sqlx's Any driver reads MySQL's TEXT as bytes.
                    "CREATE TABLE IF NOT EXISTS demo_replicas \
                     (replica VARCHAR(128) PRIMARY KEY, report VARCHAR(8192) NOT NULL) \
                     ENGINE = InnoDB",
                ],
                "INSERT INTO coupons (id, supply, remaining) VALUES ($1, $2, $3) \
                 ON DUPLICATE KEY UPDATE supply = VALUES(supply), \
                    remaining = VALUES(remaining), version = version + 1",
                "INSERT INTO demo_counters (name, value) VALUES ('audits', $1) \
                 ON DUPLICATE KEY UPDATE value = value + VALUES(value)",
                "INSERT INTO demo_replicas (replica, report) VALUES ($1, $2) \
                 ON DUPLICATE KEY UPDATE report = VALUES(report)",
            ),
        };
        Self {
            create,
            upsert_coupon: sql(upsert_coupon),
            delete_claims: sql("DELETE FROM claims WHERE coupon_id = $1"),
            stock: sql("SELECT supply, remaining FROM coupons WHERE id = $1"),
            register_fence: sql(
                "UPDATE coupons SET last_fence = greatest(last_fence, $1) WHERE id = $2",
            ),
            claims_of_user: sql(
                "SELECT count(*) FROM claims WHERE coupon_id = $1 AND user_id = $2",
            ),
            // The fence: this write commits only if no newer token has read the coupon since
            // this one registered on its read (Kleppmann's fenced write, in the database).
            write_fenced: sql(
                "UPDATE coupons SET remaining = $1, version = version + 1, last_fence = $2 \
                 WHERE id = $3 AND last_fence <= $4",
            ),
            write_unfenced: sql(
                "UPDATE coupons SET remaining = $1, version = version + 1 WHERE id = $2",
            ),
            versioned_stock: sql("SELECT supply, remaining, version FROM coupons WHERE id = $1"),
            // The optimistic lock: this write commits only if nobody wrote since the read.
            write_at_version: sql("UPDATE coupons SET remaining = $1, version = version + 1 \
                 WHERE id = $2 AND version = $3"),
            set_stock_at_version: sql(
                "UPDATE coupons SET supply = $1, remaining = $2, version = version + 1 \
                 WHERE id = $3 AND version = $4",
            ),
            insert_claim: sql("INSERT INTO claims (coupon_id, user_id) VALUES ($1, $2)"),
            set_stock: sql(
                "UPDATE coupons SET supply = $1, remaining = $2, version = version + 1 \
                 WHERE id = $3",
            ),
            add_audits: sql(add_audits),
            audits: sql("SELECT value FROM demo_counters WHERE name = 'audits'"),
            claims: sql("SELECT count(*) FROM claims WHERE coupon_id = $1"),
            repeated_users: sql(
                "SELECT count(*) FROM (SELECT user_id FROM claims WHERE coupon_id = $1 \
                 GROUP BY user_id HAVING count(*) > 1) AS repeated",
            ),
            publish_report: sql(publish_report),
            reports: sql("SELECT report FROM demo_replicas"),
            forget_report: sql("DELETE FROM demo_replicas WHERE replica = $1"),
            // MySQL's ids are binary, which sqlx's Any driver would not read as text.
            coupon_ids: match dialect {
                Dialect::Postgres => "SELECT id FROM coupons".to_owned(),
                Dialect::Mysql => "SELECT CONVERT(id USING utf8mb4) FROM coupons".to_owned(),
            },
        }
    }
}

/// `statement` with every `$n` parameter written as `?`.
fn question_marks(statement: &str) -> String {
    let mut out = String::with_capacity(statement.len());
    let mut chars = statement.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            while chars.peek().is_some_and(char::is_ascii_digit) {
                chars.next();
            }
            out.push('?');
        } else {
            out.push(c);
        }
    }
    out
}

static POSTGRES: LazyLock<Statements> = LazyLock::new(|| Statements::new(Dialect::Postgres));
static MYSQL: LazyLock<Statements> = LazyLock::new(|| Statements::new(Dialect::Mysql));
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mysql_statements_take_question_marks_in_the_same_order() {
        assert_eq!(
            question_marks("UPDATE t SET a = $1 WHERE id = $2 AND b <= $3"),
            "UPDATE t SET a = ? WHERE id = ? AND b <= ?"
        );
        assert_eq!(question_marks("SELECT '$'"), "SELECT '$'");
    }
}
