//! Relist bookkeeping in connection-scoped temporary tables (see `schema::TEMP_TABLES`).

use ghostip_core::Time;
use rusqlite::{Connection, params};

use super::error::Inner;
use super::time::to_ns;

/// What is being relisted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RelistKind {
    /// Pods: IP ownership intervals.
    Pods,
    /// Endpoints: membership intervals.
    Memberships,
}

impl RelistKind {
    fn name(self) -> &'static str {
        match self {
            RelistKind::Pods => "pods",
            RelistKind::Memberships => "memberships",
        }
    }

    /// The UPDATE that ends, at `?1` (ns) and flagged approximate, the open rows the relist
    /// did not see: pods' IP intervals close (their pod gone too), memberships end.
    fn close_unseen(self) -> &'static str {
        match self {
            RelistKind::Pods => {
                "UPDATE ip_intervals SET closed_ns = max(?1, start_ns), end_reason = 'relist', \
                 gone_ns = coalesce(gone_ns, ?1), approximate = 1 \
                 WHERE closed_ns IS NULL AND id NOT IN (SELECT id FROM temp.pod_relist_seen)"
            }
            RelistKind::Memberships => {
                "UPDATE memberships SET end_t0_ns = ?1, end_received_ns = ?1, approximate = 1 \
                 WHERE end_received_ns IS NULL AND id NOT IN (SELECT id FROM temp.membership_relist_seen)"
            }
        }
    }

    fn seen_table(self) -> &'static str {
        match self {
            RelistKind::Pods => "temp.pod_relist_seen",
            RelistKind::Memberships => "temp.membership_relist_seen",
        }
    }
}

/// Which relists are running, read once per transaction and kept in step with it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Relists {
    pods: bool,
    memberships: bool,
}

impl Relists {
    /// Reads the running relists of this connection.
    pub(crate) fn load(conn: &Connection) -> rusqlite::Result<Self> {
        let mut relists = Relists::default();
        let mut stmt = conn.prepare_cached("SELECT kind FROM temp.relists")?;
        for kind in stmt.query_map([], |r| r.get::<_, String>(0))? {
            match kind?.as_str() {
                "pods" => relists.pods = true,
                "memberships" => relists.memberships = true,
                _ => {}
            }
        }
        Ok(relists)
    }

    /// Whether a relist of `kind` is running.
    pub(crate) fn active(&self, kind: RelistKind) -> bool {
        match kind {
            RelistKind::Pods => self.pods,
            RelistKind::Memberships => self.memberships,
        }
    }

    fn set(&mut self, kind: RelistKind, on: bool) {
        match kind {
            RelistKind::Pods => self.pods = on,
            RelistKind::Memberships => self.memberships = on,
        }
    }
}

/// Starts (or restarts) a relist: nothing is marked seen yet.
pub(crate) fn begin(
    conn: &Connection,
    relists: &mut Relists,
    kind: RelistKind,
) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT OR IGNORE INTO temp.relists (kind) VALUES (?1)")?
        .execute([kind.name()])?;
    conn.execute(&format!("DELETE FROM {}", kind.seen_table()), [])?;
    relists.set(kind, true);
    Ok(())
}

/// Marks a row as seen by the running relist.
pub(crate) fn mark(conn: &Connection, kind: RelistKind, id: i64) -> rusqlite::Result<()> {
    let sql = match kind {
        RelistKind::Pods => "INSERT OR IGNORE INTO temp.pod_relist_seen (id) VALUES (?1)",
        RelistKind::Memberships => {
            "INSERT OR IGNORE INTO temp.membership_relist_seen (id) VALUES (?1)"
        }
    };
    conn.prepare_cached(sql)?.execute(params![id])?;
    Ok(())
}

/// Finishes a running relist of `kind`: the open rows it did not see end at `at`,
/// approximately (see [`RelistKind::close_unseen`]); how many it ended. Without a running
/// relist of `kind`, nothing.
pub(crate) fn finish(
    conn: &Connection,
    relists: &mut Relists,
    kind: RelistKind,
    at: Time,
) -> Result<usize, Inner> {
    if !relists.active(kind) {
        return Ok(0);
    }
    let closed = conn
        .prepare_cached(kind.close_unseen())?
        .execute([to_ns(at)?])?;
    end(conn, relists, kind)?;
    Ok(closed)
}

/// Ends a relist.
pub(crate) fn end(
    conn: &Connection,
    relists: &mut Relists,
    kind: RelistKind,
) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM temp.relists WHERE kind = ?1")?
        .execute([kind.name()])?;
    conn.execute(&format!("DELETE FROM {}", kind.seen_table()), [])?;
    relists.set(kind, false);
    Ok(())
}
