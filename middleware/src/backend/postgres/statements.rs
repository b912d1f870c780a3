//! The SQL of the PostgreSQL backend, written once per table name.
//!
//! Everything about one lock name lives in its one row, so that every acquire is a single
//! `INSERT … ON CONFLICT (name) DO UPDATE … WHERE` whose condition reads only that row: the
//! database locks the row and checks the condition against its latest version, which makes the
//! statement atomic without a transaction of its own. Parameters: `$1` name, `$2` owner token,
//! `$3` TTL in milliseconds, `$4` the holder's label, `$5` permits (semaphores only).

use crate::backend::BackendError;
use crate::backend::lock_shapes::WAITER_MARK_TTL;

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
    /// A busy writer that will ask again keeps its place among the waiting writers (its
    /// intent: when it came, until when it stands); the first of them has the next writer's
    /// turn, and bars new readers once readers alone held it back, while no writer came before
    /// it.
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
    /// `NULL`; `$11` the new holder's label, if it took the lock itself.
    /// → (rows written, announcements made): (0, 0), (1, 0) or (1, 1).
    pub(super) write_row: String,
    /// Announces `$2` on channel `$1`.
    pub(super) notify: String,
    /// `$1`'s live exclusive holder, for an operator: (now ms, owner, label, since ms, expiry
    /// ms, fence, writer) — owner `NULL` when free — and (tickets, waiting writers and
    /// readers' claims).
    pub(super) inspect: String,
    /// `$1`'s live shared holders: (owner, label, since ms, expiry ms, permits; 0 a reader).
    pub(super) inspect_shared: String,
    /// Up to `$3` names from `$2` on (after it) that start with `$1`, in order, each with
    /// whether it is held now: one page of the operator's listing.
    pub(super) held_page: String,
}

/// `$3` milliseconds from now, by the database's clock.
const EXPIRY: &str = "clock_timestamp() + $3::bigint * interval '1 millisecond'";

/// Now, in milliseconds since the epoch by the database's clock: how shared holds expire.
const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// Now, in microseconds since the epoch by the database's clock: how tickets expire.
const NOW_US: &str = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint";

/// Nobody holds the lock exclusively (never taken, released, or the lease expired).
const EXCLUSIVE_FREE: &str = "(lease.owner IS NULL OR lease.expires_at <= clock_timestamp())";

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
        // Their records, for an operator: token → `[label, since ms, permits; 0 a reader]`.
        let live_holders = format!(
            "(SELECT coalesce(jsonb_object_agg(key, value), '{{}}') FROM jsonb_each(lease.holders) \
             WHERE (lease.shared ->> key)::bigint > {NOW_MS})"
        );
        let held_shared = format!("(lease.shared ->> $2)::bigint > {NOW_MS}");
        let no_claims = format!(
            "NOT EXISTS (SELECT FROM jsonb_each(lease.claims) WHERE value::bigint > {NOW_MS})"
        );
        // Waiting writers' intents in `writers`: token → `[arrival µs, expiry ms, bars readers]`.
        let stands = format!("(writer.value ->> 1)::bigint > {NOW_MS}");
        // When `$2` came to the line of waiting writers, if its intent stands.
        let own_arrival = format!(
            "(SELECT (writer.value ->> 0)::bigint FROM jsonb_each(lease.writers) AS writer \
             WHERE writer.key = $2 AND {stands})"
        );
        // Writers whose intents stand; those that came before `$2` (all, if it has no place).
        let live_writers = format!(
            "(SELECT coalesce(jsonb_object_agg(writer.key, writer.value), '{{}}') \
             FROM jsonb_each(lease.writers) AS writer WHERE {stands})"
        );
        let writers_ahead = format!(
            "EXISTS (SELECT FROM jsonb_each(lease.writers) AS writer \
             WHERE {stands} AND writer.key <> $2 AND ((writer.value ->> 0)::bigint, writer.key) \
                < (coalesce({own_arrival}, 9223372036854775807), $2::text))"
        );
        let no_bar = format!(
            "NOT EXISTS (SELECT FROM jsonb_each(lease.writers) AS writer \
             WHERE {stands} AND (writer.value ->> 2)::boolean)"
        );
        // `$2`'s intent stands and bars readers: readers' claims do not hold it back.
        let own_bar = format!(
            "EXISTS (SELECT FROM jsonb_each(lease.writers) AS writer \
             WHERE writer.key = $2 AND {stands} AND (writer.value ->> 2)::boolean)"
        );
        let live_claims = format!(
            "(SELECT coalesce(jsonb_object_agg(key, value), '{{}}') FROM jsonb_each(lease.claims) \
             WHERE value::bigint > {NOW_MS})"
        );
        let exclusive = |condition: &str, writer: bool, also: &str| {
            acquire(
                table,
                condition,
                &format!(
                    "(name, owner, expires_at, fence, holder, since, is_writer) \
                     SELECT $1, $2, {EXPIRY}, 1, $4, clock_timestamp(), {writer}"
                ),
                &format!(
                    "owner = excluded.owner, expires_at = excluded.expires_at, \
                     fence = lease.fence + 1, holder = excluded.holder, since = excluded.since, \
                     is_writer = excluded.is_writer, shared = '{{}}', holders = '{{}}'{also}"
                ),
                "fence",
            )
        };
        let shared = |condition: &str, permits: &str| {
            acquire(
                table,
                condition,
                &format!(
                    "(name, fence, shared, holders) \
                     SELECT $1, 0, jsonb_build_object($2::text, {NOW_MS} + $3::bigint), \
                        jsonb_build_object($2::text, jsonb_build_array($4::text, {NOW_MS}, {permits}))"
                ),
                &format!(
                    "shared = {live_shared} || excluded.shared, \
                     holders = {live_holders} || excluded.holders, claims = lease.claims - $2"
                ),
                "0::bigint",
            )
        };
        let free = format!("{EXCLUSIVE_FREE} AND {no_shared}");
        Ok(Self {
            table: table.to_owned(),
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {table} (\
                    name text COLLATE \"C\" PRIMARY KEY, \
                    owner text, \
                    expires_at timestamptz, \
                    fence bigint NOT NULL, \
                    holder text, \
                    since timestamptz, \
                    is_writer boolean NOT NULL DEFAULT false, \
                    shared jsonb NOT NULL DEFAULT '{{}}', \
                    holders jsonb NOT NULL DEFAULT '{{}}', \
                    claims jsonb NOT NULL DEFAULT '{{}}', \
                    writers jsonb NOT NULL DEFAULT '{{}}', \
                    waited boolean NOT NULL DEFAULT false, \
                    tickets text NOT NULL DEFAULT '')"
            ),
            acquire: exclusive(&free, false, ""),
            acquire_write: exclusive(
                &format!("{free} AND NOT {writers_ahead} AND ({no_claims} OR {own_bar})"),
                true,
                &format!(", writers = {live_writers} - $2::text"),
            ),
            acquire_read: shared(&format!("{EXCLUSIVE_FREE} AND {no_bar}"), "0"),
            acquire_permit: shared(&format!("{EXCLUSIVE_FREE} AND {live_count} < $5"), "$5"),
            write_intent: format!(
                "UPDATE {table} AS lease SET writers = {live_writers} || jsonb_build_object(\
                    $2::text, jsonb_build_array(coalesce({own_arrival}, {NOW_US}), {NOW_MS} + {}, \
                        ({own_bar} OR (NOT {no_shared} AND {no_claims})) AND NOT {writers_ahead})) \
                 WHERE name = $1",
                WAITER_MARK_TTL.as_millis()
            ),
            claim: format!(
                "UPDATE {table} AS lease \
                 SET claims = {live_claims} || jsonb_build_object($2::text, {NOW_MS} + {}) \
                 WHERE name = $1",
                WAITER_MARK_TTL.as_millis()
            ),
            // A lock a release handed on through the queue gets its holder's label here.
            extend: format!(
                "UPDATE {table} AS lease \
                 SET expires_at = {EXPIRY}, holder = coalesce(lease.holder, $4) \
                 WHERE name = $1 AND lease.owner = $2 AND lease.expires_at > clock_timestamp()"
            ),
            // A waited-for lock is released through the queue (`sql::tickets`) instead.
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
                "UPDATE {table} AS lease \
                 SET shared = lease.shared - $2::text, holders = lease.holders - $2::text \
                 WHERE name = $1 AND {held_shared} RETURNING waited"
            ),
            abandon: format!(
                "UPDATE {table} AS lease SET \
                    owner = CASE WHEN lease.owner = $2 THEN NULL ELSE lease.owner END, \
                    expires_at = CASE WHEN lease.owner = $2 THEN NULL ELSE lease.expires_at END, \
                    shared = lease.shared - $2::text, \
                    holders = lease.holders - $2::text, \
                    claims = lease.claims - $2::text, \
                    writers = lease.writers - $2::text \
                 WHERE name = $1 AND (lease.owner = $2 OR lease.shared ? $2 \
                    OR lease.claims ? $2 OR lease.writers ? $2) \
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
                        holder = CASE $2::int WHEN 1 THEN $11 ELSE holder END, \
                        since = CASE $2::int WHEN 1 THEN clock_timestamp() ELSE since END, \
                        is_writer = CASE $2::int WHEN 1 THEN false ELSE is_writer END, \
                        fence = $5, waited = $6, tickets = $7, \
                        writers = writers - coalesce($3::text, '') \
                    WHERE name = $1 AND xmin = $8::text::xid \
                    RETURNING 1), \
                 announced AS (\
                    SELECT pg_notify($9, $10) FROM written WHERE $10::text IS NOT NULL) \
                 SELECT (SELECT count(*) FROM written), (SELECT count(*) FROM announced)"
            ),
            notify: "SELECT pg_notify($1, $2)".to_owned(),
            inspect: format!(
                "SELECT {NOW_MS}, CASE WHEN {} THEN NULL ELSE owner END, holder, \
                    (extract(epoch FROM since) * 1000)::bigint, \
                    (extract(epoch FROM expires_at) * 1000)::bigint, fence, is_writer, tickets, \
                    (SELECT count(*) FROM jsonb_each(lease.writers) AS writer WHERE {stands}) \
                    + (SELECT count(*) FROM jsonb_each(lease.claims) WHERE value::bigint > {NOW_MS}) \
                 FROM {table} AS lease WHERE name = $1",
                EXCLUSIVE_FREE
            ),
            inspect_shared: format!(
                "SELECT held.key, lease.holders -> held.key ->> 0, \
                    (lease.holders -> held.key ->> 1)::bigint, held.value::bigint, \
                    coalesce((lease.holders -> held.key ->> 2)::bigint, 0) \
                 FROM {table} AS lease, jsonb_each(lease.shared) AS held \
                 WHERE lease.name = $1 AND held.value::bigint > {NOW_MS}"
            ),
            held_page: format!(
                "SELECT name, NOT ({EXCLUSIVE_FREE} AND {no_shared}) FROM {table} AS lease \
                 WHERE name >= $1 AND name > $2 ORDER BY name LIMIT $3"
            ),
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
                    (SELECT to_timestamp(min((value ->> 1)::bigint) / 1000.0) FROM jsonb_each(writers) \
                     WHERE (value ->> 1)::bigint > {NOW_MS}), \
                    (SELECT to_timestamp(min(value::bigint) / 1000.0) FROM jsonb_each(shared) \
                     WHERE value::bigint > {NOW_MS}), \
                    (SELECT to_timestamp(min(value::bigint) / 1000.0) FROM jsonb_each(claims) \
                     WHERE value::bigint > {NOW_MS})) - clock_timestamp()) * 1000)::bigint \
                 FROM previous), \
                (SELECT waited FROM previous)"
    )
}
