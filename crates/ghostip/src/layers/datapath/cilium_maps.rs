//! Reads Cilium's load-balancer table straight from its pinned BPF maps in this node's bpffs (the default reader of `--datapath cilium`, and how `--datapath auto` recognises a Cilium node): no exec, no Cilium API.
//!
//! Opens `cilium_lb{4,6}_services_v2`, `cilium_lb{4,6}_backends_v3` and
//! `cilium_lb{4,6}_reverse_nat` under `--cilium-bpf-dir` (default
//! [`DEFAULT_PIN_DIR`]) with aya, checks each map's key and value sizes from the kernel's
//! map info against the layout [`ghostip_datapath::cilium_maps`] decodes (an unknown
//! layout is refused, never guessed), copies the entries, and decodes them there, straight
//! into the packed table (the copied bytes are dropped before it is returned).
//!
//! # How a map is copied
//! With `BPF_MAP_LOOKUP_BATCH` ([`super::bpf_batch`]: Linux 5.6+, hash maps;
//! [`BATCH_ENTRIES`] entries per call at first, doubled up to `max_entries` when one hash
//! bucket holds more), each batch appended to the map's dump as it comes. Where the kernel
//! refuses the command (`EINVAL` before 5.6, `ENOTSUPP`/`EOPNOTSUPP`, `EPERM`) the map is
//! read again from the start key by key with aya (`BPF_MAP_GET_NEXT_KEY` +
//! `BPF_MAP_LOOKUP_ELEM`, two syscalls a key). [`read_maps_with`] picks the method and
//! reports which one each map used.
//!
//! Opening a pinned map (`BPF_OBJ_GET`) and reading it (`BPF_MAP_LOOKUP_BATCH`, or
//! `BPF_MAP_GET_NEXT_KEY` + `BPF_MAP_LOOKUP_ELEM`) need `CAP_BPF` (Linux 5.8+;
//! `CAP_SYS_ADMIN` before) and read access to the pin files, which Cilium creates `0600`
//! root: the agent runs as root with the bpffs mounted (`hostPath /sys/fs/bpf`, read-only
//! is enough).
//!
//! # Maps replaced while being read
//! Cilium replaces its maps when it restarts with a new layout or size (a new map is pinned
//! under the old name). A read records each map's kernel id when it opens it and checks the
//! pins again at the end; if one changed, the whole read is repeated, at most
//! [`MAX_ATTEMPTS`] times, then fails: a table is never built from maps of two generations.
//! One map's read stops after [`walk_bound`] entries, batched or not (a hash map's
//! key-by-key iteration restarts from the first key when the current one is deleted, so a
//! map under heavy churn could otherwise be walked forever); that also counts as a change
//! and is retried.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use std::os::fd::AsFd;

use aya::maps::{HashMap, Map, MapData, MapError, MapInfo, MapType};
use aya::sys::SyscallError;
use ghostip_datapath::cilium_maps::{self, Family, LbMaps, MAPS, MapDump, MapSpec, Role};

use super::bpf_batch::{self, BATCH_ENTRIES, BatchError};
use super::readers::{ReadOutcome, ReaderError};

/// Where Cilium pins its maps (`tc/globals` of the bpffs at `/sys/fs/bpf`).
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/tc/globals";

/// Reads of the whole set of maps before giving up when a map keeps being replaced.
pub const MAX_ATTEMPTS: usize = 3;

/// Most entries read from one map (batched or key by key): twice its `max_entries` plus 1024.
pub fn walk_bound(max_entries: u32) -> u64 {
    2 * u64::from(max_entries) + 1024
}

/// Whether `dir` holds Cilium's pinned services map (v4 or v6): how `--datapath auto`
/// recognises a Cilium node.
pub fn has_cilium_maps(dir: &Path) -> bool {
    MAPS.iter()
        .filter(|m| m.role == Role::Services)
        .any(|m| dir.join(m.name).exists())
}

/// Why one attempt did not produce a consistent set of maps.
enum Attempt {
    /// A map was replaced or changed too much during the read: try again.
    Changed(String),
    /// Anything else: give up.
    Failed(ReaderError),
}

fn program(name: &str) -> String {
    format!("bpf map {name}")
}

fn map_error(name: &str, path: &Path, e: MapError) -> ReaderError {
    let io = match &e {
        MapError::SyscallError(s) => Some(&s.io_error),
        _ => None,
    };
    match io.map(io::Error::kind) {
        Some(io::ErrorKind::PermissionDenied) => ReaderError::Privilege {
            program: program(name),
            capability: "CAP_BPF (or CAP_SYS_ADMIN before Linux 5.8) and read access to the bpffs pins",
            stderr: format!("{}: {e}", path.display()),
        },
        Some(io::ErrorKind::NotFound) => ReaderError::Absent {
            program: program(name),
            what: "pinned Cilium map",
            stderr: path.display().to_string(),
        },
        _ => ReaderError::Other(format!("{}: {e}", path.display())),
    }
}

/// Copies one hash map's entries into `dump` key by key (`BPF_MAP_GET_NEXT_KEY` +
/// `BPF_MAP_LOOKUP_ELEM`); returns the syscalls made; `Err(Changed)` past the walk bound.
fn walk<const K: usize, const V: usize>(
    data: MapData,
    max_entries: u32,
    dump: &mut MapDump,
    path: &Path,
) -> Result<u64, Attempt> {
    let name = dump.spec().name;
    let map = Map::from_map_data(data).map_err(|e| Attempt::Failed(map_error(name, path, e)))?;
    let map: HashMap<MapData, [u8; K], [u8; V]> = HashMap::try_from(map).map_err(|e| {
        Attempt::Failed(ReaderError::Other(format!(
            "{}: not a hash map of {K}-byte keys and {V}-byte values: {e}",
            path.display()
        )))
    })?;
    let bound = walk_bound(max_entries);
    let mut walked = 0u64;
    for entry in map.iter() {
        walked += 1;
        if walked > bound {
            return Err(Attempt::Changed(format!(
                "{name}: more than {bound} keys walked (the map changed during the walk)"
            )));
        }
        let (k, v) = entry.map_err(|e| Attempt::Failed(map_error(name, path, e)))?;
        dump.push(&k, &v);
    }
    // One GET_NEXT_KEY and one LOOKUP_ELEM per key, and the GET_NEXT_KEY that ends.
    Ok(2 * walked + 1)
}

/// Copies one hash map's entries into `dump` with `BPF_MAP_LOOKUP_BATCH`; returns the
/// calls made. `Ok(None)` when the kernel does no batch lookups on it (`dump` is then
/// left partly filled: the caller starts over key by key); `Err(Changed)` past the walk
/// bound.
fn batch(
    data: &MapData,
    max_entries: u32,
    dump: &mut MapDump,
    path: &Path,
    method: ReadMethod,
    stats: &mut ReadStats,
) -> Result<Option<u64>, Attempt> {
    let spec = dump.spec();
    let (entries, flags) = match method {
        ReadMethod::Batch { entries } => (entries, 0),
        // A `flags` value the kernel rejects with EINVAL, as one without batch lookups does.
        ReadMethod::BatchRefusedByKernel => (BATCH_ENTRIES, 1),
        ReadMethod::PerKey => return Ok(None),
    };
    let bound = walk_bound(max_entries);
    let mut read = 0u64;
    let mut bad_batch = false;
    let run = bpf_batch::read_hash(
        data.fd().as_fd(),
        (spec.key_size, spec.value_size),
        max_entries,
        entries,
        flags,
        |keys, values| {
            read += (keys.len() / spec.key_size.max(1)) as u64;
            if read > bound {
                return false;
            }
            bad_batch = !dump.extend(keys, values);
            !bad_batch
        },
    );
    match run {
        Ok(run) if run.stopped && bad_batch => Err(Attempt::Failed(ReaderError::Other(format!(
            "{}: BPF_MAP_LOOKUP_BATCH returned keys and values of different counts",
            path.display()
        )))),
        Ok(run) if run.stopped => Err(Attempt::Changed(format!(
            "{}: more than {bound} entries read (the map changed during the read)",
            spec.name
        ))),
        Ok(run) => {
            stats.batches_grown += run.grown;
            Ok(Some(run.calls))
        }
        Err(BatchError::Unsupported(_)) => Ok(None),
        Err(BatchError::Failed(io_error)) => Err(Attempt::Failed(map_error(
            spec.name,
            path,
            MapError::SyscallError(SyscallError {
                call: "BPF_MAP_LOOKUP_BATCH",
                io_error,
            }),
        ))),
    }
}

/// Opens and copies `spec`'s map; `Ok(None)` when it is not pinned. Returns its kernel id.
fn read_one(
    dir: &Path,
    spec: &MapSpec,
    method: ReadMethod,
    stats: &mut ReadStats,
) -> Result<Option<(u32, MapDump)>, Attempt> {
    let path = dir.join(spec.name);
    if !path.exists() {
        return Ok(None);
    }
    let data =
        MapData::from_pin(&path).map_err(|e| Attempt::Failed(map_error(spec.name, &path, e)))?;
    let info = data
        .info()
        .map_err(|e| Attempt::Failed(map_error(spec.name, &path, e)))?;
    let new_dump = || {
        MapDump::new(
            spec.name,
            info.key_size() as usize,
            info.value_size() as usize,
        )
        .map_err(|e| {
            Attempt::Failed(ReaderError::Other(format!(
                "{}: {e}; this Cilium's load-balancer maps are not supported, use \
                 --cilium-read exec",
                path.display()
            )))
        })
    };
    let mut dump = new_dump()?;
    let max = info.max_entries();
    // Batches only on the hash maps the walk below accepts; it refuses anything else.
    if matches!(info.map_type(), Ok(MapType::Hash | MapType::LruHash)) {
        if let Some(calls) = batch(&data, max, &mut dump, &path, method, stats)? {
            stats.syscalls += calls;
            stats.batched_maps += 1;
            return Ok(Some((info.id(), dump)));
        }
        if method != ReadMethod::PerKey {
            stats.fallbacks += 1;
        }
        dump = new_dump()?;
    }
    let calls = match (spec.key_size, spec.value_size) {
        (12, 12) => walk::<12, 12>(data, max, &mut dump, &path)?,
        (4, 12) => walk::<4, 12>(data, max, &mut dump, &path)?,
        (2, 6) => walk::<2, 6>(data, max, &mut dump, &path)?,
        (24, 12) => walk::<24, 12>(data, max, &mut dump, &path)?,
        (4, 24) => walk::<4, 24>(data, max, &mut dump, &path)?,
        (2, 18) => walk::<2, 18>(data, max, &mut dump, &path)?,
        (k, v) => {
            return Err(Attempt::Failed(ReaderError::Other(format!(
                "{}: no reader for {k}-byte keys and {v}-byte values",
                path.display()
            ))));
        }
    };
    stats.syscalls += calls;
    stats.walked_maps += 1;
    Ok(Some((info.id(), dump)))
}

/// One read of every map, then a check that none was replaced meanwhile.
fn attempt(dir: &Path, method: ReadMethod, stats: &mut ReadStats) -> Result<LbMaps, Attempt> {
    let mut maps = LbMaps::default();
    let mut ids = Vec::new();
    for family in [Family::V4, Family::V6] {
        let specs: Vec<&MapSpec> = MAPS.iter().filter(|m| m.family == family).collect();
        let services_pinned = specs
            .iter()
            .any(|m| m.role == Role::Services && dir.join(m.name).exists());
        if !services_pinned {
            continue;
        }
        for spec in specs {
            match read_one(dir, spec, method, stats)? {
                Some((id, dump)) => {
                    ids.push((spec.name, id));
                    maps.maps.push(dump);
                }
                None if spec.role == Role::RevNat => {}
                None => {
                    return Err(Attempt::Changed(format!(
                        "{} is not pinned while its family's services map is",
                        spec.name
                    )));
                }
            }
        }
    }
    if ids.is_empty() {
        return Err(Attempt::Failed(ReaderError::Absent {
            program: "bpf maps".into(),
            what: "pinned Cilium load-balancer maps",
            stderr: format!(
                "no cilium_lb4_services_v2 or cilium_lb6_services_v2 in {}",
                dir.display()
            ),
        }));
    }
    for (name, id) in ids {
        let now = MapInfo::from_pin(dir.join(name)).map(|i| i.id()).ok();
        if now != Some(id) {
            return Err(Attempt::Changed(format!(
                "{name} was replaced during the read"
            )));
        }
    }
    Ok(maps)
}

/// How the reader copies a map out of the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMethod {
    /// `BPF_MAP_LOOKUP_BATCH`, `entries` per call at first (grown when one hash bucket
    /// holds more); key by key where the kernel does no batch lookups (before Linux 5.6).
    Batch {
        /// Entries asked for per call ([`BATCH_ENTRIES`] by default).
        entries: u32,
    },
    /// [`ReadMethod::Batch`] with a `flags` value the kernel refuses with `EINVAL`, as a
    /// kernel without the command does: reaches the key-by-key fallback on any kernel
    /// (for tests; the agent never uses it).
    BatchRefusedByKernel,
    /// `BPF_MAP_GET_NEXT_KEY` + `BPF_MAP_LOOKUP_ELEM` per key.
    PerKey,
}

impl Default for ReadMethod {
    fn default() -> Self {
        Self::Batch {
            entries: BATCH_ENTRIES,
        }
    }
}

/// How a read went, over every attempt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Map syscalls made (batch calls, or per-key lookups and next-key calls).
    pub syscalls: u64,
    /// Maps read in batches.
    pub batched_maps: u32,
    /// Maps read key by key.
    pub walked_maps: u32,
    /// Maps read key by key because the kernel refused the batch call.
    pub fallbacks: u32,
    /// Times a batch was grown because one hash bucket held more entries.
    pub batches_grown: u32,
}

/// Reads the maps under `dir` into dumps, repeating the read when a map was replaced.
pub fn read_maps(dir: &Path) -> Result<LbMaps, ReaderError> {
    read_maps_with(dir, ReadMethod::default()).map(|(maps, _)| maps)
}

/// [`read_maps`] with the method given, and how the read went.
pub fn read_maps_with(dir: &Path, method: ReadMethod) -> Result<(LbMaps, ReadStats), ReaderError> {
    let mut last = String::new();
    let mut stats = ReadStats::default();
    for _ in 0..MAX_ATTEMPTS {
        match attempt(dir, method, &mut stats) {
            Ok(maps) => return Ok((maps, stats)),
            Err(Attempt::Changed(why)) => last = why,
            Err(Attempt::Failed(e)) => return Err(e),
        }
    }
    Err(ReaderError::Other(format!(
        "Cilium's load-balancer maps in {} kept changing during {MAX_ATTEMPTS} reads ({last}); \
         no table from a half-replaced set",
        dir.display()
    )))
}

/// Reads and decodes the maps under `dir`, measuring the CPU it costs.
pub fn read_table(dir: &Path) -> Result<ReadOutcome, ReaderError> {
    let started = crate::clock::monotonic_now();
    let cpu0 = super::readers::thread_cpu();
    let maps = read_maps(dir)?;
    let read_cpu = super::readers::thread_cpu_since(cpu0);
    let cpu1 = super::readers::thread_cpu();
    let bytes = maps.bytes();
    // Straight into the compact table: no `LbTable` beside the copied bytes.
    let table = cilium_maps::decode_packed(&maps);
    drop(maps);
    let parse_cpu = super::readers::thread_cpu_since(cpu1);
    Ok(ReadOutcome {
        table,
        // The map syscalls stand where a dump program's CPU would.
        child_cpu: read_cpu,
        parse_cpu,
        wall: started.elapsed(),
        bytes,
    })
}

/// [`read_table`] on a blocking thread, given up after `timeout` (`--read-timeout`; the
/// thread itself ends at the walk bound).
pub async fn read_cilium_maps(dir: PathBuf, timeout: Duration) -> Result<ReadOutcome, ReaderError> {
    let task = tokio::task::spawn_blocking(move || read_table(&dir));
    match tokio::time::timeout(timeout, task).await {
        Ok(joined) => {
            joined.map_err(|e| ReaderError::Other(format!("reader thread failed: {e}")))?
        }
        Err(_) => Err(ReaderError::Timeout {
            program: "bpf maps".into(),
            after: timeout,
            cpu: Duration::ZERO,
        }),
    }
}
