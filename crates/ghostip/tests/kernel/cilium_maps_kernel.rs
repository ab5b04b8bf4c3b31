//! The agent's Cilium map reader against a real kernel: hash maps with Cilium's pinned names, key/value sizes and contents, created and pinned in a bpffs this test mounts in a private mount namespace, read back by `cilium_maps::read_table`.
//!
//! The maps are read through a read-only bind mount of that bpffs, as the DaemonSet mounts
//! the host's. Each test runs on a thread that leaves the host's mount namespace (`unshare(CLONE_NEWNS)`),
//! makes every mount private (nothing propagates back), and mounts a fresh bpffs on a
//! temporary directory: the host's `/sys/fs/bpf` is never touched. The maps and the mount go
//! away with the thread's namespace and the last file descriptor.
//!
//! Ignored unless run as root with `GHOSTIP_NETNS_TESTS=1`:
//! `GHOSTIP_NETNS_TESTS=1 cargo test -p ghostip --test kernel cilium -- --ignored --test-threads=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use aya::maps::{HashMap, Map, MapData};
use ghostip::layers::datapath::bpf_batch::BATCH_ENTRIES;
use ghostip::layers::datapath::cilium_maps::{
    ReadMethod, ReadStats, read_maps, read_maps_with, read_table,
};
use ghostip::layers::datapath::readers::ReaderError;
use ghostip_datapath::cilium_maps::{LbMaps, decode};
use ghostip_datapath::{BackendState, Protocol};
use ghostip_testkit::env::require_netns;
use rustix::mount::{MountFlags, MountPropagationFlags};

const BPF_MAP_TYPE_HASH: u32 = 1;

/// Runs `f` on a thread in a private mount namespace with a bpffs mounted at the path it
/// is given.
fn in_private_bpffs<T: Send>(f: impl FnOnce(&Path) -> T + Send) -> T {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    std::thread::scope(|s| {
        s.spawn(|| {
            #[allow(deprecated)] // NEWNS only: no file-descriptor table is unshared.
            rustix::thread::unshare(rustix::thread::UnshareFlags::NEWNS)
                .expect("unshare(CLONE_NEWNS)");
            rustix::mount::mount_change(
                "/",
                MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
            )
            .expect("making / private in the new mount namespace");
            rustix::mount::mount("bpf", &path, "bpf", MountFlags::empty(), None)
                .expect("mounting a bpffs in the private mount namespace");
            f(&path)
        })
        .join()
        .unwrap()
    })
}

/// Creates a hash map named like Cilium's (the kernel keeps 15 bytes of the name), fills it,
/// and pins it as `dir/name`.
fn pin_map<const K: usize, const V: usize>(dir: &Path, name: &str, entries: &[([u8; K], [u8; V])]) {
    pin_map_sized(dir, name, 1024, entries);
}

/// [`pin_map`] with `max_entries` given.
fn pin_map_sized<const K: usize, const V: usize>(
    dir: &Path,
    name: &str,
    max_entries: u32,
    entries: &[([u8; K], [u8; V])],
) {
    let kernel_name: String = name.chars().take(15).collect();
    let obj = aya_obj::Map::new_from_params(BPF_MAP_TYPE_HASH, K as u32, V as u32, max_entries, 0);
    let data =
        MapData::create(obj, &kernel_name, None).expect("creating a hash map (BPF_MAP_CREATE)");
    data.pin(dir.join(name)).expect("pinning the map");
    let mut map: HashMap<MapData, [u8; K], [u8; V]> =
        HashMap::try_from(Map::from_map_data(data).unwrap()).unwrap();
    for (k, v) in entries {
        map.insert(k, v, 0).unwrap();
    }
}

fn lb4_key(ip: [u8; 4], port: u16, slot: u16, proto: u8) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&ip);
    b[4..6].copy_from_slice(&port.to_be_bytes());
    b[6..8].copy_from_slice(&slot.to_ne_bytes());
    b[8] = proto;
    b
}

fn lb4_service(backend_id: u32, count: u16, rev: u16, flags: u8, qcount: u16) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&backend_id.to_ne_bytes());
    b[4..6].copy_from_slice(&count.to_ne_bytes());
    b[6..8].copy_from_slice(&rev.to_be_bytes());
    b[8] = flags;
    b[10..12].copy_from_slice(&qcount.to_ne_bytes());
    b
}

fn lb4_backend(ip: [u8; 4], port: u16, state: u8) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&ip);
    b[4..6].copy_from_slice(&port.to_be_bytes());
    b[6] = 17;
    b[7] = state;
    b
}

const DNS: [u8; 4] = [10, 96, 0, 10];
const ROUTABLE: u8 = 1 << 6;

/// kube-dns 10.96.0.10:53/udp with one active backend, one terminating, and a slot naming
/// backend 3, which the backends map no longer has.
fn pin_cilium_maps(globals: &Path) {
    pin_map::<12, 12>(
        globals,
        "cilium_lb4_services_v2",
        &[
            (lb4_key(DNS, 53, 0, 17), lb4_service(0, 2, 7, ROUTABLE, 1)),
            (lb4_key(DNS, 53, 1, 17), lb4_service(1, 0, 7, 0, 0)),
            (lb4_key(DNS, 53, 2, 17), lb4_service(3, 0, 7, 0, 0)),
            (lb4_key(DNS, 53, 3, 17), lb4_service(2, 0, 7, 0, 0)),
        ],
    );
    pin_map::<4, 12>(
        globals,
        "cilium_lb4_backends_v3",
        &[
            (1u32.to_ne_bytes(), lb4_backend([10, 244, 1, 5], 53, 0)),
            (2u32.to_ne_bytes(), lb4_backend([10, 244, 2, 9], 53, 1)),
        ],
    );
    let mut rev = [0u8; 6];
    rev[..4].copy_from_slice(&DNS);
    rev[4..].copy_from_slice(&53u16.to_be_bytes());
    pin_map::<2, 6>(
        globals,
        "cilium_lb4_reverse_nat",
        &[(7u16.to_be_bytes(), rev)],
    );
}

fn globals(root: &Path) -> PathBuf {
    let g = root.join("tc/globals");
    std::fs::create_dir_all(&g).unwrap();
    g
}

#[test]
#[ignore = "needs root and a bpffs (GHOSTIP_NETNS_TESTS=1)"]
fn pinned_cilium_maps_are_read_into_the_table() {
    require_netns("a private mount namespace with a bpffs, BPF maps");
    let (outcome, maps) = in_private_bpffs(|root| {
        let g = globals(root);
        pin_cilium_maps(&g);
        // Read through a read-only bind mount, as the DaemonSet mounts the host's bpffs.
        let ro = tempfile::tempdir().unwrap();
        rustix::mount::mount_bind(root, ro.path()).unwrap();
        rustix::mount::mount_remount(ro.path(), MountFlags::BIND | MountFlags::RDONLY, "").unwrap();
        let g = ro.path().join("tc/globals");
        assert!(
            std::fs::create_dir(g.join("x")).is_err(),
            "the bind mount is writable"
        );
        let read = (read_table(&g).unwrap(), read_maps(&g).unwrap());
        rustix::mount::unmount(ro.path(), rustix::mount::UnmountFlags::DETACH).unwrap();
        read
    });
    assert!(outcome.bytes > 0);
    let table = decode(&maps);
    assert_eq!(table.frontends.len(), 1, "{table:?}");
    let fe = table
        .frontend(IpAddr::V4(Ipv4Addr::from(DNS)), 53, Protocol::Udp)
        .unwrap();
    assert_eq!(fe.flags, ["backend-id-3-not-found"]);
    let got: Vec<(IpAddr, u16, BackendState)> = fe
        .backends
        .iter()
        .map(|b| (b.ip, b.port, b.state.clone()))
        .collect();
    assert_eq!(
        got,
        [
            (
                IpAddr::V4(Ipv4Addr::new(10, 244, 1, 5)),
                53,
                BackendState::Active
            ),
            (
                IpAddr::V4(Ipv4Addr::new(10, 244, 2, 9)),
                53,
                BackendState::Terminating
            ),
        ]
    );
    assert_eq!(outcome.table.frontends.len(), 1);
}

#[test]
#[ignore = "needs root and a bpffs (GHOSTIP_NETNS_TESTS=1)"]
fn a_map_of_another_layout_is_refused_by_name_and_sizes() {
    require_netns("a private mount namespace with a bpffs, BPF maps");
    let err = in_private_bpffs(|root| {
        let g = globals(root);
        // A backends map whose values are 16 bytes: not a layout the decoder knows.
        pin_map::<12, 12>(g.as_path(), "cilium_lb4_services_v2", &[]);
        pin_map::<4, 16>(g.as_path(), "cilium_lb4_backends_v3", &[([0; 4], [0; 16])]);
        read_table(&g).unwrap_err()
    });
    let msg = err.to_string();
    assert!(matches!(err, ReaderError::Other(_)), "{err:?}");
    assert!(
        msg.contains("cilium_lb4_backends_v3: unknown layout: key 4 B, value 16 B"),
        "{msg}"
    );
}

#[test]
#[ignore = "needs root and a bpffs (GHOSTIP_NETNS_TESTS=1)"]
fn a_bpffs_without_cilium_maps_is_absent() {
    require_netns("a private mount namespace with a bpffs");
    let err = in_private_bpffs(|root| read_table(&globals(root)).unwrap_err());
    assert!(matches!(err, ReaderError::Absent { .. }), "{err:?}");
}

#[test]
#[ignore = "needs root and a bpffs (GHOSTIP_NETNS_TESTS=1)"]
fn datapath_show_prints_the_maps_with_backend_states() {
    require_netns("a private mount namespace with a bpffs, BPF maps");
    // The child inherits the spawning thread's mount namespace, so it sees the private bpffs.
    let out = in_private_bpffs(|root| {
        let g = globals(root);
        pin_cilium_maps(&g);
        std::process::Command::new(env!("CARGO_BIN_EXE_ghostip"))
            .args(["datapath", "show", "--from-bpf"])
            .arg(&g)
            .output()
            .unwrap()
    });
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("10.96.0.10:53"), "{text}");
    assert!(text.contains("10.244.2.9:53 terminating"), "{text}");
    assert!(text.contains("backend-id-3-not-found"), "{text}");
}

const BIG_SERVICES: u32 = 700;
const BIG_PER_SERVICE: u32 = 15;

/// 700 services with 15 backends each: 11 200 service entries and 10 500 backends, each
/// map more than [`BATCH_ENTRIES`] (`max_entries` 16 384).
fn pin_big_cilium_maps(globals: &Path) {
    const { assert!(BIG_SERVICES * BIG_PER_SERVICE > BATCH_ENTRIES) };
    let (mut services, mut backends, mut rev_nat) = (Vec::new(), Vec::new(), Vec::new());
    for s in 0..BIG_SERVICES {
        let vip = [10, 96, (s >> 8) as u8, s as u8];
        let rev = (s + 1) as u16;
        services.push((
            lb4_key(vip, 53, 0, 17),
            lb4_service(0, BIG_PER_SERVICE as u16, rev, ROUTABLE, 0),
        ));
        let mut r = [0u8; 6];
        r[..4].copy_from_slice(&vip);
        r[4..].copy_from_slice(&53u16.to_be_bytes());
        rev_nat.push((rev.to_be_bytes(), r));
        for b in 0..BIG_PER_SERVICE {
            let id = s * BIG_PER_SERVICE + b + 1;
            services.push((
                lb4_key(vip, 53, (b + 1) as u16, 17),
                lb4_service(id, 0, rev, 0, 0),
            ));
            let ip = [10, 128, (id >> 8) as u8, id as u8];
            backends.push((id.to_ne_bytes(), lb4_backend(ip, 53, (id % 2) as u8)));
        }
    }
    pin_map_sized(globals, "cilium_lb4_services_v2", 16_384, &services);
    pin_map_sized(globals, "cilium_lb4_backends_v3", 16_384, &backends);
    pin_map_sized(globals, "cilium_lb4_reverse_nat", 16_384, &rev_nat);
}

/// The big maps read with each method, in one namespace.
fn read_big_with(methods: &[ReadMethod]) -> Vec<(LbMaps, ReadStats)> {
    in_private_bpffs(|root| {
        let g = globals(root);
        pin_big_cilium_maps(&g);
        methods
            .iter()
            .map(|m| read_maps_with(&g, *m).unwrap())
            .collect()
    })
}

const BIG_ENTRIES: u64 =
    (BIG_SERVICES * (BIG_PER_SERVICE + 1) + BIG_SERVICES * BIG_PER_SERVICE + BIG_SERVICES) as u64;

#[test]
#[ignore = "needs root and a bpffs (GHOSTIP_NETNS_TESTS=1)"]
fn maps_bigger_than_one_batch_are_read_whole_and_equal_to_the_per_key_walk() {
    require_netns("a private mount namespace with a bpffs, BPF maps");
    let read = read_big_with(&[ReadMethod::default(), ReadMethod::PerKey]);
    let [(batched, b), (walked, w)] = &read[..] else {
        unreachable!()
    };
    // Batched: all three maps, a few calls each, no fallback.
    assert_eq!(b.batched_maps, 3, "{b:?}");
    assert_eq!((b.walked_maps, b.fallbacks), (0, 0), "{b:?}");
    assert!(b.syscalls <= 3 * 8, "{b:?}");
    // Key by key: two calls per key and one that ends each map.
    assert_eq!((w.walked_maps, w.batched_maps), (3, 0), "{w:?}");
    assert_eq!(w.syscalls, 2 * BIG_ENTRIES + 3, "{w:?}");
    assert_eq!(batched.bytes(), walked.bytes());
    // Services 12 + 12 bytes an entry, backends 4 + 12, rev-NAT 2 + 6.
    let bytes = 24 * BIG_SERVICES * (BIG_PER_SERVICE + 1)
        + 16 * BIG_SERVICES * BIG_PER_SERVICE
        + 8 * BIG_SERVICES;
    assert_eq!(batched.bytes(), u64::from(bytes));
    let table = decode(batched);
    assert_eq!(table, decode(walked));
    assert_eq!(table.frontends.len(), BIG_SERVICES as usize);
    assert_eq!(
        table.backend_count(),
        (BIG_SERVICES * BIG_PER_SERVICE) as usize
    );
    assert!(
        table.frontends.iter().all(|f| f.flags.is_empty()),
        "{table:?}"
    );
}

#[test]
#[ignore = "needs root and a bpffs (GHOSTIP_NETNS_TESTS=1)"]
fn a_bucket_bigger_than_the_batch_grows_it() {
    require_netns("a private mount namespace with a bpffs, BPF maps");
    // One entry per call: the first bucket holding two keys answers ENOSPC.
    let read = read_big_with(&[ReadMethod::Batch { entries: 1 }, ReadMethod::PerKey]);
    let [(batched, b), (walked, _)] = &read[..] else {
        unreachable!()
    };
    assert!(b.batches_grown > 0, "{b:?}");
    assert_eq!((b.batched_maps, b.fallbacks), (3, 0), "{b:?}");
    assert_eq!(decode(batched), decode(walked));
}

#[test]
#[ignore = "needs root and a bpffs (GHOSTIP_NETNS_TESTS=1)"]
fn a_kernel_refusing_batches_is_read_key_by_key_to_the_same_table() {
    require_netns("a private mount namespace with a bpffs, BPF maps");
    let read = read_big_with(&[ReadMethod::BatchRefusedByKernel, ReadMethod::default()]);
    let [(fallback, f), (batched, _)] = &read[..] else {
        unreachable!()
    };
    assert_eq!(
        (f.fallbacks, f.walked_maps, f.batched_maps),
        (3, 3, 0),
        "{f:?}"
    );
    assert_eq!(f.syscalls, 2 * BIG_ENTRIES + 3, "{f:?}");
    assert_eq!(decode(fallback), decode(batched));
    assert_eq!(fallback.bytes(), batched.bytes());
}
