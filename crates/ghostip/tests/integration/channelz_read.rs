//! The channelz reader against what a channelz port can be: the lab's real grpc-go client
//! (`grpcclient`, with `grpcserver` backends on loopback), a gRPC server without channelz,
//! an HTTP/1 server, a port that answers garbage or nothing, a closed port.
//!
//! The tests with the lab's programs need them built (`lab/build grpc`, `lab/build grpcjava`
//! for the grpc-java client); they are found in
//! `$GHOSTIP_LAB_BIN`, else in the `$LAB_BIN` of `lab/lib.sh`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ghostip::layers::channelz::budget::ReadBudget;
use ghostip::layers::channelz::reader::{ReadBounds, ReadError, read, read_within};
use ghostip_core::{ServiceKey, Time};
use ghostip_session::layers::channelz::drain::holders;
use ghostip_session::layers::channelz::{ChannelzModel, ClientPod, ClientRead, ConnState};
use ghostip_session::{
    Received, ResourceKind, Session, SessionConfig, SyncState, TruthEvent, TruthKey, TruthObject,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn bounds(deadline: Duration) -> ReadBounds {
    ReadBounds {
        deadline,
        ..ReadBounds::default()
    }
}

/// A loopback server that answers every connection with `reply` (or nothing) and keeps it
/// open for at most 10 s.
async fn fake_server(reply: Option<&'static [u8]>) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        for _ in 0..16 {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await;
                if let Some(reply) = reply {
                    let _ = s.write_all(reply).await;
                }
                tokio::time::sleep(Duration::from_secs(10)).await;
            });
        }
    });
    addr
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn a_closed_port_is_a_connect_error() {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let e = read(addr, &bounds(Duration::from_secs(2)))
        .await
        .unwrap_err();
    assert!(matches!(e, ReadError::Connect { .. }), "{e}");
    assert_eq!(e.label(), "connect");
    assert!(e.to_string().contains(&addr.to_string()), "{e}");
}

#[tokio::test]
async fn an_http1_server_on_the_port_is_an_error_not_a_read() {
    let addr = fake_server(Some(
        b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    ))
    .await;
    let started = Instant::now();
    let e = read(addr, &bounds(Duration::from_secs(2)))
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "bounded");
    assert!(
        matches!(
            e,
            ReadError::Connect { .. } | ReadError::Status { .. } | ReadError::Timeout { .. }
        ),
        "{e}"
    );
}

#[tokio::test]
async fn garbage_on_the_port_is_an_error_not_a_read() {
    let addr = fake_server(Some(&[0xff; 64])).await;
    let e = read(addr, &bounds(Duration::from_secs(2)))
        .await
        .unwrap_err();
    assert_ne!(e.label(), "unimplemented", "{e}");
}

#[tokio::test]
async fn a_silent_port_ends_at_the_deadline() {
    let addr = fake_server(None).await;
    let started = Instant::now();
    let e = read(addr, &bounds(Duration::from_millis(500)))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(matches!(e, ReadError::Timeout { .. }), "{e}");
    assert!(took < Duration::from_secs(3), "{took:?}");
}

/// A read waiting for the budget is not timed out by its deadline: with the budget's next
/// slot 1 s away and a 300 ms deadline, the silent port's read ends 300 ms after its slot,
/// not 300 ms after it started. The port speaks HTTP/2 (an empty SETTINGS frame), so the
/// connection is made and the read reaches its first request; then it never answers.
#[tokio::test]
async fn waiting_for_the_budget_does_not_count_against_the_deadline() {
    let addr = fake_server(Some(b"\0\0\0\x04\0\0\0\0\0")).await;
    let budget = ReadBudget::new(std::num::NonZeroU32::MIN);
    // Takes the slot of now: the next is 1 s away.
    budget.acquire().await;
    let started = Instant::now();
    let e = read_within(addr, &bounds(Duration::from_millis(300)), Some(&budget))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(matches!(e, ReadError::Timeout { .. }), "{e}");
    assert!(
        took >= Duration::from_millis(1200),
        "{took:?} {e} {}",
        budget.granted()
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(budget.granted(), 2);
}

/// Where the lab's programs are.
fn lab_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("GHOSTIP_LAB_BIN") {
        return p.into();
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = Command::new("bash")
        .args(["-c", ". lab/lib.sh >/dev/null && printf %s \"$LAB_BIN\""])
        .current_dir(root)
        .output()
        .expect("bash");
    PathBuf::from(String::from_utf8(out.stdout).unwrap())
}

/// A child killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(bin: &str, args: &[String]) -> Proc {
    let path = lab_bin().join(bin);
    assert!(
        path.is_file(),
        "{} is missing: run lab/build grpc, lab/build grpcjava",
        path.display()
    );
    Proc(
        Command::new(path)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn server(port: u16) -> Proc {
    spawn(
        "grpcserver",
        &[
            format!("--listen=127.0.0.1:{port}"),
            "--name=web".into(),
            "--grace=1s".into(),
        ],
    )
}

const TARGET: &str = "dns:///web.demo.svc.cluster.local:50051";

/// The lab's grpc-go client; see [`client_of`].
fn client(cz: u16, addresses: &[String], extra: &[String]) -> Proc {
    client_of("grpcclient", cz, addresses, extra)
}

/// The lab's client `bin` (`grpcclient`, or `grpcjava`, which takes the same flags) dialing
/// [`TARGET`] with round_robin, serving channelz on loopback port `cz`.
fn client_of(bin: &str, cz: u16, addresses: &[String], extra: &[String]) -> Proc {
    let mut args = vec![
        format!("--target={TARGET}"),
        format!("--channelz-listen=127.0.0.1:{cz}"),
        "--rate=20".into(),
        "--duration=60s".into(),
    ];
    if !addresses.is_empty() {
        args.push(format!("--addresses={}", addresses.join(",")));
    }
    args.extend_from_slice(extra);
    spawn(bin, &args)
}

fn at(s: i64) -> Time {
    Time::from_second(1_800_000_000 + s).unwrap()
}

fn truth(s: &mut Session, event: TruthEvent, t: i64) -> ghostip_session::Actions {
    s.on_truth(&Received { at: at(t), event })
}

/// A synced session with the channelz model and headless `demo/web`: one slice per port,
/// `web-<port>`, each listing 127.0.0.1 on that port.
fn web_session(ports: &[u16]) -> Session {
    use ghostip_core::truth::{AddressType, EndpointPort, EndpointRecord, SliceRecord};
    let kinds = [ResourceKind::EndpointSlices, ResourceKind::Services];
    let mut s = Session::new(SessionConfig::default(), SyncState::new(at(0), kinds));
    s.register(ChannelzModel::default());
    let svc = ghostip_testkit::records::headless_service(ServiceKey::new("demo", "web"));
    truth(&mut s, TruthEvent::Init(ResourceKind::Services), 0);
    truth(&mut s, TruthEvent::InitApply(TruthObject::Service(svc)), 0);
    truth(&mut s, TruthEvent::InitDone(ResourceKind::Services), 0);
    truth(&mut s, TruthEvent::Init(ResourceKind::EndpointSlices), 0);
    for port in ports {
        let slice = SliceRecord {
            namespace: "demo".into(),
            name: format!("web-{port}"),
            service: "web".into(),
            address_type: AddressType::IPv4,
            endpoints: vec![EndpointRecord {
                ip: "127.0.0.1".parse().unwrap(),
                ready: true,
                serving: true,
                terminating: false,
                pod: None,
                node: None,
                hostname: None,
            }],
            ports: vec![EndpointPort {
                name: None,
                port: *port,
                protocol: ghostip_core::Protocol::Tcp,
            }],
            trigger_time: None,
        };
        truth(&mut s, TruthEvent::InitApply(TruthObject::Slice(slice)), 0);
    }
    truth(
        &mut s,
        TruthEvent::InitDone(ResourceKind::EndpointSlices),
        0,
    );
    assert!(s.synced());
    s
}

/// Reads until `done` holds, for at most `within`.
async fn read_until(
    cz: SocketAddr,
    within: Duration,
    done: impl Fn(&ClientRead) -> bool,
) -> ClientRead {
    let started = Instant::now();
    let mut last = None;
    while started.elapsed() < within {
        match read(cz, &ReadBounds::default()).await {
            Ok(r) if done(&r) => return r,
            Ok(r) => last = Some(Ok(r)),
            Err(e) => last = Some(Err(e.to_string())),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("not reached within {within:?}; last read: {last:?}");
}

fn state_of(r: &ClientRead, addr: &str) -> Option<ConnState> {
    let addr: SocketAddr = addr.parse().unwrap();
    r.channels
        .iter()
        .filter(|c| c.target == TARGET)
        .flat_map(|c| &c.subchannels)
        .find(|s| s.address == Some(addr))
        .map(|s| s.state)
}

/// The real grpc-go client balancing over two real servers: both subchannels READY with
/// their addresses; one server killed, its subchannel leaves READY but the balancer still
/// holds the address (what the model judges stale once the pod left its Service); the
/// servers' own port (no channelz service) is UNIMPLEMENTED.
#[tokio::test]
#[ignore = "needs the lab's grpc programs (lab/build grpc)"]
async fn the_real_grpc_go_client_shows_its_subchannels_and_a_killed_backend() {
    shows_its_subchannels_and_a_killed_backend("grpcclient", Duration::from_secs(15)).await;
}

/// The same with the real grpc-java client (`grpcjava`, grpc-java's `round_robin` over
/// Netty): its subchannels' channelz targets are address groups, `[[/127.0.0.1:port]/{}]`,
/// and a killed backend's subchannel goes IDLE, CONNECTING or TRANSIENT_FAILURE, still
/// holding its address. The JVM's start is slower than Go's: READY is awaited for longer.
#[tokio::test]
#[ignore = "needs the lab's grpc programs (lab/build grpc, lab/build grpcjava)"]
async fn the_real_grpc_java_client_shows_its_subchannels_and_a_killed_backend() {
    shows_its_subchannels_and_a_killed_backend("grpcjava", Duration::from_secs(40)).await;
}

/// The client `bin` balancing over two real servers, read and judged (see the callers).
async fn shows_its_subchannels_and_a_killed_backend(bin: &str, ready_within: Duration) {
    let (pa, pb, cz) = (free_port(), free_port(), free_port());
    let a = format!("127.0.0.1:{pa}");
    let b = format!("127.0.0.1:{pb}");
    let _sa = server(pa);
    let mut sb = server(pb);
    let _c = client_of(bin, cz, &[a.clone(), b.clone()], &[]);
    let cz_addr: SocketAddr = format!("127.0.0.1:{cz}").parse().unwrap();

    let r = read_until(cz_addr, ready_within, |r| {
        state_of(r, &a) == Some(ConnState::Ready) && state_of(r, &b) == Some(ConnState::Ready)
    })
    .await;
    // The model, fed the real reads: headless demo/web lists both servers.
    let mut s = web_session(&[pa, pb]);
    let pod = ClientPod {
        namespace: "demo".into(),
        name: "client-0".into(),
    };
    let (out, actions) = s
        .with_layer_cx::<ChannelzModel, _>(|m, cx| m.on_read(cx, &pod, &r, at(1)))
        .unwrap();
    assert_eq!((out.judged, out.stale), (1, 0), "{r:?}");
    assert!(actions.events.is_empty(), "{:?}", actions.events);
    let ch: Vec<_> = r.channels.iter().filter(|c| c.target == TARGET).collect();
    assert_eq!(ch.len(), 1, "{r:?}");
    assert_eq!(ch[0].subchannels.len(), 2, "{r:?}");
    assert!(!r.truncated);

    // Kill b: its subchannel fails, but round_robin keeps the address until re-resolution.
    let _ = sb.0.kill();
    let _ = sb.0.wait();
    let r = read_until(cz_addr, Duration::from_secs(15), |r| {
        matches!(
            state_of(r, &b),
            Some(ConnState::TransientFailure | ConnState::Idle | ConnState::Connecting)
        )
    })
    .await;
    assert_eq!(state_of(&r, &a), Some(ConnState::Ready));
    let held = holders(&r, "127.0.0.1".parse().unwrap());
    assert_eq!(
        held.len(),
        2,
        "both subchannels still hold an address: {held:?}"
    );

    // With b's endpoint gone from demo/web (at 2 s), b's subchannel is stale for this
    // client, in its real state.
    let actions = truth(
        &mut s,
        TruthEvent::Delete(TruthKey::Slice {
            namespace: "demo".into(),
            name: format!("web-{pb}"),
        }),
        2,
    );
    assert_eq!(
        actions.events.len(),
        1,
        "b's window opens: {:?}",
        actions.events
    );
    let (out, actions) = s
        .with_layer_cx::<ChannelzModel, _>(|m, cx| m.on_read(cx, &pod, &r, at(3)))
        .unwrap();
    assert_eq!((out.judged, out.stale), (1, 1), "{r:?}");
    assert!(out.recorded.len() == 1, "the stale observation is recorded");
    let stale: Vec<_> = s
        .layer::<ChannelzModel>()
        .unwrap()
        .stale()
        .cloned()
        .collect();
    assert_eq!(stale.len(), 1);
    assert_eq!(stale[0].address, b.parse::<SocketAddr>().unwrap());
    assert_eq!(stale[0].client, "demo/client-0");
    assert_ne!(stale[0].state, ConnState::Ready);
    let _ = actions;

    // A gRPC server without channelz.
    let e = read(a.parse().unwrap(), &ReadBounds::default())
        .await
        .unwrap_err();
    assert_eq!(e.label(), "unimplemented", "{e}");
}

/// A client with 3 000 subchannels (to closed loopback ports) read with a bound of 1 000:
/// the read stops at the bound and says it is truncated.
#[tokio::test]
#[ignore = "needs the lab's grpc programs (lab/build grpc)"]
async fn a_client_with_more_subchannels_than_the_bound_is_read_up_to_it() {
    let cz = free_port();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("addrs");
    let lines: Vec<String> = (0..3000)
        .map(|i| format!("127.0.{}.{}:9", 1 + i / 250, 1 + i % 250))
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let _c = client(cz, &[], &[format!("--addresses-file={}", file.display())]);
    let cz_addr: SocketAddr = format!("127.0.0.1:{cz}").parse().unwrap();
    let b = ReadBounds {
        max_subchannels: 1000,
        deadline: Duration::from_secs(10),
        ..ReadBounds::default()
    };
    let started = Instant::now();
    let r = loop {
        match read(cz_addr, &b).await {
            // The balancer creates its subchannels as it takes in the addresses.
            Ok(r) if r.truncated => break r,
            r if started.elapsed() > Duration::from_secs(20) => panic!("no truncated read: {r:?}"),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let n: usize = r.channels.iter().map(|c| c.subchannels.len()).sum();
    assert_eq!(n, 1000, "read up to the bound, not past it");
}
