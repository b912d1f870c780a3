//! The SQL of the PostgreSQL backend, written once per table name.
//!
//! Everything about one lock name lives in its one row, so that every acquire is a single
//! `INSERT … ON CONFLICT (name) DO UPDATE … WHERE` whose condition reads only that row: the
//! database locks the row and checks the condition against its latest version, which makes the
//! statement atomic without a transaction of its own. Parameters: `$1` name, `$2` owner token,
//! `$3` TTL in milliseconds, `$4` permits (semaphores only).

use crate::backend::BackendError;
use crate::backend::shapes::WAITER_MARK_TTL;

/// The statements on one lease table.
#[derive(Debug)]
pub(super) struct Statements {
    pub(super) table: String,
    pub(super) create_table: String,
    /// → (fence if taken, holder's ms left if busy, waited for).
    pub(super) acquire: String,
    /// → (0 if taken, ms until the lock may change if busy, waited for).
    pub(super) acquire_read: String,
    /// → (fence if taken, ms until the lock may change if busy, waited for).
    pub(super) acquire_write: String,
    /// → (0 if taken, ms until the first permit's lease ends if busy, waited for).
    pub(super) acquire_permit: String,
    /// Whether the table has the columns added since 0.1 (a role that may use the table but
    /// not alter it must not be asked to).
    pub(super) has_new_columns: String,
    /// Adds the columns added since 0.1 to a table made by an earlier version.
    pub(super) add_columns: String,
    /// A busy writer that will ask again leaves its intent, unless another writer's stands:
    /// the next writer's turn, barring new readers once readers alone held it back.
    pub(super) write_intent: String,
    /// A busy reader that will ask again claims the next turn for readers.
    pub(super) claim: String,
    /// One row changed if the exclusive lease was still held.
    pub(super) extend: String,
    /// One row changed if the exclusive lease was still held.
    pub(super) release: String,
    /// One row changed if the shared hold was still held.
    pub(super) extend_shared: String,
    /// One row changed if the shared hold was still held.
    pub(super) release_shared: String,
    /// Drops whatever `$2` holds or intends on `$1`: exclusive lease, shared hold, intent, claim;
    /// → whether the lock is waited for.
    pub(super) abandon: String,
    /// A busy caller that listens marks the lock as waited for, so its release is announced.
    pub(super) mark_waited: String,
    /// Makes sure `$1` has a row, to lock.
    pub(super) ensure_row: String,
    /// `$1`'s row as the queue sees it (`sql::tickets::RowColumns`: now, the live exclusive
    /// holder and its µs left, µs until the first shared hold ends, fence, tickets, whether
    /// readers wait), and its version: `xmin`, the transaction that wrote it, as text.
    pub(super) read_row: String,
    /// Writes a queue operation's change if the row is still at version `$8`: `$2` 0 keeps
    /// the holder, 1 makes `$3` the holder for `$4` µs (its intent goes), 2 frees the lock;
    /// `$5` fence, `$6` waited, `$7` tickets; announces `$10` on channel `$9` unless it is
    /// `NULL`.
    /// → (rows written, announcements made): (0, 0), (1, 0) or (1, 1).
    pub(super) write_row: String,
    /// Announces `$2` on channel `$1`.
    pub(super) notify: String,
}

/// `$3` milliseconds from now, by the database's clock.
const EXPIRY: &str = "clock_timestamp() + $3::bigint * interval '1 millisecond'";

/// Now, in milliseconds since the epoch by the database's clock: how shared holds expire.
const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// Now, in microseconds since the epoch by the database's clock: how tickets expire.
const NOW_US: &str = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint";

/// Nobody holds the lock exclusively (never taken, released, or the lease expired).
const EXCLUSIVE_FREE: &str = "(lease.owner IS NULL OR lease.expires_at <= clock_timestamp())";

/// No waiting writer's intent stands.
const NO_INTENT: &str = "(lease.intent IS NULL OR lease.intent_expires <= clock_timestamp())";

/// No waiting writer's intent bars readers.
const NO_BAR: &str = "(NOT lease.intent_bars OR lease.intent IS NULL \
    OR lease.intent_expires <= clock_timestamp())";

/// `$2`'s intent stands and bars readers: readers' claims do not hold it back.
const OWN_BAR: &str = "(lease.intent = $2 AND lease.intent_bars \
    AND lease.intent_expires > clock_timestamp())";

impl Statements {
    /// The statements on `table`: one or two plain identifiers (`name` or `schema.name`).
    pub(super) fn for_table(table: &str) -> Result<Self, BackendError> {
        super::super::sql::check_table_name(table)?;
        let no_shared = format!(
            "NOT EXISTS (SELECT FROM jsonb_each(lease.shared) WHERE value::bigint > {NOW_MS})"
        );
        let live_count = format!(
            "(SELECT count(*) FROM jsonb_each(lease.shared) WHERE value::bigint > {NOW_MS})"
        );
        let live_shared = format!(
            "(SELECT coalesce(jsonb_object_agg(key, value), '{{}}') FROM jsonb_each(lease.shared) \
             WHERE value::bigint > {NOW_MS})"
        );
        let held_shared = format!("(lease.shared ->> $2)::bigint > {NOW_MS}");
        let no_claims = format!(
            "NOT EXISTS (SELECT FROM jsonb_each(lease.claims) WHERE value::bigint > {NOW_MS})"
        );
        // The intent of `$3`, given the lock by a queue operation, goes.
        let intent_goes_to_3 = "intent_bars = intent_bars AND intent IS DISTINCT FROM $3, \
            intent_expires = CASE WHEN intent = $3 THEN NULL ELSE intent_expires END, \
            intent = CASE WHEN intent = $3 THEN NULL ELSE intent END";
        let live_claims = format!(
            "(SELECT coalesce(jsonb_object_agg(key, value), '{{}}') FROM jsonb_each(lease.claims) \
             WHERE value::bigint > {NOW_MS})"
        );
        let intent_expiry = format!(
            "clock_timestamp() + interval '{} milliseconds'",
            WAITER_MARK_TTL.as_millis()
        );
        let exclusive = |condition: &str, also: &str| {
            acquire(
                table,
                condition,
                &format!("(name, owner, expires_at, fence) SELECT $1, $2, {EXPIRY}, 1"),
                &format!(
                    "owner = excluded.owner, expires_at = excluded.expires_at, \
                     fence = lease.fence + 1, shared = '{{}}'{also}"
                ),
                "fence",
            )
        };
        let shared = |condition: &str| {
            acquire(
                table,
                condition,
                &format!(
                    "(name, fence, shared) \
                     SELECT $1, 0, jsonb_build_object($2::text, {NOW_MS} + $3::bigint)"
                ),
                &format!("shared = {live_shared} || excluded.shared, claims = lease.claims - $2"),
                "0::bigint",
            )
        };
        let free = format!("{EXCLUSIVE_FREE} AND {no_shared}");
        Ok(Self {
            table: table.to_owned(),
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {table} (\
                    name text PRIMARY KEY, \
                    owner text, \
                    expires_at timestamptz, \
                    fence bigint NOT NULL, \
                    shared jsonb NOT NULL DEFAULT '{{}}', \
                    intent text, \
                    intent_expires timestamptz, \
                    intent_bars boolean NOT NULL DEFAULT false, \
                    claims jsonb NOT NULL DEFAULT '{{}}', \
                    waited boolean NOT NULL DEFAULT false, \
                    tickets text NOT NULL DEFAULT '')"
            ),
            has_new_columns: format!(
                "SELECT EXISTS (SELECT FROM pg_attribute \
                 WHERE attrelid = to_regclass('{table}') AND attname = 'claims' \
                    AND NOT attisdropped)"
            ),
            add_columns: format!(
                "ALTER TABLE {table} \
                    ADD COLUMN IF NOT EXISTS intent_bars boolean NOT NULL DEFAULT false, \
                    ADD COLUMN IF NOT EXISTS claims jsonb NOT NULL DEFAULT '{{}}'"
            ),
            acquire: exclusive(&free, ""),
            acquire_write: exclusive(
                &format!(
                    "{free} AND ({NO_INTENT} OR lease.intent = $2) AND ({no_claims} OR {OWN_BAR})"
                ),
                ", intent = NULL, intent_expires = NULL, intent_bars = false",
            ),
            acquire_read: shared(&format!("{EXCLUSIVE_FREE} AND {NO_BAR}")),
            acquire_permit: shared(&format!("{EXCLUSIVE_FREE} AND {live_count} < $4")),
            write_intent: format!(
                "UPDATE {table} AS lease SET intent = $2, intent_expires = {intent_expiry}, \
                    intent_bars = {OWN_BAR} OR (NOT {no_shared} AND {no_claims}) \
                 WHERE name = $1 AND ({NO_INTENT} OR lease.intent = $2)"
            ),
            claim: format!(
                "UPDATE {table} AS lease \
                 SET claims = {live_claims} || jsonb_build_object($2::text, {NOW_MS} + {}) \
                 WHERE name = $1",
                WAITER_MARK_TTL.as_millis()
            ),
            extend: format!(
                "UPDATE {table} AS lease SET expires_at = {EXPIRY} \
                 WHERE name = $1 AND lease.owner = $2 AND lease.expires_at > clock_timestamp()"
            ),
            // A waited-for lock is released through the queue (`sql::queue`) instead.
            release: format!(
                "UPDATE {table} AS lease SET owner = NULL, expires_at = NULL \
                 WHERE name = $1 AND lease.owner = $2 AND lease.expires_at > clock_timestamp() \
                    AND NOT lease.waited"
            ),
            extend_shared: format!(
                "UPDATE {table} AS lease \
                 SET shared = jsonb_set(lease.shared, ARRAY[$2::text], to_jsonb({NOW_MS} + $3::bigint)) \
                 WHERE name = $1 AND {held_shared}"
            ),
            release_shared: format!(
                "UPDATE {table} AS lease SET shared = lease.shared - $2::text \
                 WHERE name = $1 AND {held_shared} RETURNING waited"
            ),
            abandon: format!(
                "UPDATE {table} AS lease SET \
                    owner = CASE WHEN lease.owner = $2 THEN NULL ELSE lease.owner END, \
                    expires_at = CASE WHEN lease.owner = $2 THEN NULL ELSE lease.expires_at END, \
                    shared = lease.shared - $2::text, \
                    claims = lease.claims - $2::text, \
                    intent = CASE WHEN lease.intent = $2 THEN NULL ELSE lease.intent END, \
                    intent_expires = \
                        CASE WHEN lease.intent = $2 THEN NULL ELSE lease.intent_expires END, \
                    intent_bars = lease.intent_bars AND lease.intent IS DISTINCT FROM $2 \
                 WHERE name = $1 AND (lease.owner = $2 OR lease.shared ? $2 \
                    OR lease.claims ? $2 OR lease.intent = $2) \
                 RETURNING waited"
            ),
            mark_waited: format!("UPDATE {table} SET waited = true WHERE name = $1 AND NOT waited"),
            ensure_row: format!(
                "INSERT INTO {table} (name, fence) VALUES ($1, 0) ON CONFLICT (name) DO NOTHING"
            ),
            read_row: format!(
                "SELECT {NOW_US}, \
                    CASE WHEN expires_at > clock_timestamp() THEN owner END, \
                    CASE WHEN expires_at > clock_timestamp() THEN \
                        (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint \
                    END, \
                    (SELECT min(value::bigint) * 1000 - {NOW_US} FROM jsonb_each(shared) \
                     WHERE value::bigint > {NOW_MS}), \
                    fence, tickets, NOT {no_claims}, xmin::text \
                 FROM {table} AS lease WHERE name = $1"
            ),
            write_row: format!(
                "WITH written AS (\
                    UPDATE {table} SET \
                        owner = CASE $2::int WHEN 0 THEN owner WHEN 1 THEN $3 END, \
                        expires_at = CASE $2::int WHEN 0 THEN expires_at \
                            WHEN 1 THEN clock_timestamp() + $4::bigint * interval '1 microsecond' \
                        END, \
                        fence = $5, waited = $6, tickets = $7, {intent_goes_to_3} \
                    WHERE name = $1 AND xmin = $8::text::xid \
                    RETURNING 1), \
                 announced AS (\
                    SELECT pg_notify($9, $10) FROM written WHERE $10::text IS NOT NULL) \
                 SELECT (SELECT count(*) FROM written), (SELECT count(*) FROM announced)"
            ),
            notify: "SELECT pg_notify($1, $2)".to_owned(),
        })
    }
}

/// One acquire statement: the row `insert`s (columns and a `SELECT` of their values) when
/// the name has none, or is updated as `update` says (and returns `returning`) when
/// `condition` holds on it; when busy, it answers how many milliseconds until the lock may
/// change: the soonest end of the exclusive lease, of a shared hold, of a waiting writer's
/// intent or of a reader's claim; and whether the lock is waited for already.
///
/// A busy lock is seen on the row as it stood when the statement began, without locking it,
/// and the insert is then not even tried: only an acquire that may succeed waits for the row
/// lock and checks `condition` again on the row's latest version. So waiters polling a held
/// lock do not queue on its row lock, ahead of the holder's release.
fn acquire(table: &str, condition: &str, insert: &str, update: &str, returning: &str) -> String {
    format!(
        "WITH previous AS (SELECT * FROM {table} WHERE name = $1), \
         taken AS (\
            INSERT INTO {table} AS lease {insert} \
            WHERE NOT EXISTS (SELECT FROM previous AS lease WHERE NOT ({condition})) \
            ON CONFLICT (name) DO UPDATE SET {update} WHERE {condition} \
            RETURNING {returning}) \
         SELECT (SELECT * FROM taken), \
                (SELECT ceil(extract(epoch FROM least(\
                    CASE WHEN expires_at > clock_timestamp() THEN expires_at END, \
                    CASE WHEN intent_expires > clock_timestamp() THEN intent_expires END, \
                    (SELECT to_timestamp(min(value::bigint) / 1000.0) FROM jsonb_each(shared) \
                     WHERE value::bigint > {NOW_MS}), \
                    (SELECT to_timestamp(min(value::bigint) / 1000.0) FROM jsonb_each(claims) \
                     WHERE value::bigint > {NOW_MS})) - clock_timestamp()) * 1000)::bigint \
                 FROM previous), \
                (SELECT waited FROM previous)"
    )
}
