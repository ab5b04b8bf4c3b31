package lab.grpcjava;

import com.google.protobuf.StringValue;
import io.grpc.CallOptions;
import io.grpc.EquivalentAddressGroup;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.InsecureServerCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.MethodDescriptor;
import io.grpc.NameResolver;
import io.grpc.NameResolverProvider;
import io.grpc.NameResolverRegistry;
import io.grpc.Server;
import io.grpc.StatusOr;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.protobuf.ProtoUtils;
import io.grpc.protobuf.services.ChannelzService;
import io.grpc.stub.ClientCalls;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The lab's grpc-java client, the Java twin of lab/grpc/cmd/grpcclient: it dials {@code --target}
 * ({@code dns:///name:port}: grpc-java's DNS resolver, through the JVM's resolver and its cache at
 * the JVM default) with {@code round_robin}, calls {@code ghostip.lab.Echo/Echo} at a fixed {@code
 * --rate} for {@code --duration}, and logs every failure with grpc-java's own text, an RFC 3339 UTC
 * timestamp and the target. It serves channelz ({@link ChannelzService}) on {@code
 * --channelz-listen} from a separate server, which is what ghostip's channelz layer reads.
 *
 * <p>Every loop is bounded: by {@code --duration} and by {@code --max-calls}.
 */
public final class Client {
  private static final String NAME = "grpcjava";

  /** The Go server's Echo: protobuf's well-known StringValue both ways, no generated code. */
  private static final MethodDescriptor<StringValue, StringValue> ECHO =
      MethodDescriptor.<StringValue, StringValue>newBuilder()
          .setType(MethodDescriptor.MethodType.UNARY)
          .setFullMethodName("ghostip.lab.Echo/Echo")
          .setRequestMarshaller(ProtoUtils.marshaller(StringValue.getDefaultInstance()))
          .setResponseMarshaller(ProtoUtils.marshaller(StringValue.getDefaultInstance()))
          .build();

  private static final String USAGE =
      String.join(
          "\n",
          "usage: grpcjava [flags]",
          "  --target T            gRPC target to dial (default dns:///web.demo.svc.cluster.local:50051)",
          "  --rate R              calls per second (default 10)",
          "  --duration D          stop after this long, e.g. 90s, 2m (default 90s)",
          "  --max-calls N         stop after this many calls (default 100000)",
          "  --call-timeout D      deadline of one call (default 1s)",
          "  --channelz-listen A   host:port to serve channelz on; :port is every interface;",
          "                        empty: none (default :9901)",
          "  --channelz-port P     same as --channelz-listen :P",
          "  --addresses L         comma-separated host:port list the target's name resolves to,",
          "                        instead of its resolver (tests on loopback)",
          "  --addresses-file F    file of host:port lines the target's name resolves to,",
          "                        instead of its resolver (# comments, blank lines skipped)");

  private Client() {}

  private static void log(String msg) {
    System.out.println(Instant.now() + " " + NAME + ": " + msg);
    System.out.flush();
  }

  private static void usage(String why) {
    System.err.println(NAME + ": " + why);
    System.err.println(USAGE);
    System.exit(2);
  }

  /** Parses 90s, 500ms, 2m, 1h (Go's time.Duration subset the lab uses). */
  static Duration duration(String flag, String v) {
    try {
      if (v.endsWith("ms")) {
        return Duration.ofMillis(Long.parseLong(v.substring(0, v.length() - 2)));
      }
      long n = Long.parseLong(v.substring(0, v.length() - 1));
      switch (v.charAt(v.length() - 1)) {
        case 's':
          return Duration.ofSeconds(n);
        case 'm':
          return Duration.ofMinutes(n);
        case 'h':
          return Duration.ofHours(n);
        default:
          break;
      }
    } catch (NumberFormatException | StringIndexOutOfBoundsException e) {
      // reported below
    }
    usage(flag + ": not a duration (e.g. 90s, 500ms, 2m): " + v);
    return Duration.ZERO;
  }

  public static void main(String[] argv) throws Exception {
    String target = "dns:///web.demo.svc.cluster.local:50051";
    double rate = 10;
    Duration runFor = Duration.ofSeconds(90);
    long maxCalls = 100000;
    Duration callTimeout = Duration.ofSeconds(1);
    String czListen = ":9901";
    String addrList = "";
    String addrFile = "";
    for (int i = 0; i < argv.length; i++) {
      String a = argv[i];
      if (a.equals("-h") || a.equals("--help") || a.equals("-help")) {
        System.out.println(USAGE);
        return;
      }
      String flag = a.replaceFirst("^--?", "--");
      String value;
      int eq = flag.indexOf('=');
      if (eq >= 0) {
        value = flag.substring(eq + 1);
        flag = flag.substring(0, eq);
      } else if (i + 1 < argv.length) {
        value = argv[++i];
      } else {
        usage(a + ": needs a value");
        return;
      }
      try {
        switch (flag) {
          case "--target":
            target = value;
            break;
          case "--rate":
            rate = Double.parseDouble(value);
            break;
          case "--duration":
            runFor = duration(flag, value);
            break;
          case "--max-calls":
            maxCalls = Long.parseLong(value);
            break;
          case "--call-timeout":
            callTimeout = duration(flag, value);
            break;
          case "--channelz-listen":
            czListen = value;
            break;
          case "--channelz-port":
            czListen = ":" + Integer.parseInt(value);
            break;
          case "--addresses":
            addrList = value;
            break;
          case "--addresses-file":
            addrFile = value;
            break;
          default:
            usage("unknown flag " + a);
            return;
        }
      } catch (NumberFormatException e) {
        usage(flag + ": not a number: " + value);
        return;
      }
    }
    if (!(rate > 0) || maxCalls < 1) {
      usage("--rate must be > 0 and --max-calls >= 1");
    }

    Server cz = null;
    if (!czListen.isEmpty()) {
      InetSocketAddress at = null;
      try {
        at = socketAddress("--channelz-listen", czListen, true);
      } catch (IllegalArgumentException | IOException e) {
        usage(e.getMessage());
      }
      cz =
          NettyServerBuilder.forAddress(at, InsecureServerCredentials.create())
              .addService(ChannelzService.newInstance(100))
              .build();
      try {
        cz.start();
      } catch (IOException e) {
        log("channelz listen " + czListen + ": " + e);
        System.exit(2);
      }
      log("channelz on " + cz.getListenSockets());
    }

    List<InetSocketAddress> fixed = new ArrayList<>();
    try {
      fixed = fixedAddresses(addrList, addrFile);
    } catch (IllegalArgumentException | IOException e) {
      log(e.getMessage());
      System.exit(2);
    }
    if (!fixed.isEmpty()) {
      // The target keeps its text (what channelz shows); its scheme resolves to the addresses.
      int sep = target.indexOf(":///");
      String scheme = sep > 0 ? target.substring(0, sep) : "dns";
      // Registered in the default registry above grpc-java's own DNS provider (priority 5),
      // before the channel builder is made.
      NameResolverRegistry.getDefaultRegistry().register(new FixedResolverProvider(scheme, fixed));
      log("target=" + target + " resolves to " + fixed.size() + " fixed addresses");
    }
    // After the registration: the channel builder takes the target scheme's provider when made.
    ManagedChannelBuilder<?> b =
        Grpc.newChannelBuilder(target, InsecureChannelCredentials.create())
            .defaultLoadBalancingPolicy("round_robin");
    ManagedChannel cc = b.build();

    AtomicBoolean stop = new AtomicBoolean();
    Thread main = Thread.currentThread();
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  stop.set(true);
                  main.interrupt();
                  try {
                    main.join(2000);
                  } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                  }
                }));

    log(String.format("target=%s calling at %.1f/s for %ss", target, rate, runFor.toSeconds()));
    long periodNanos = (long) (1e9 / rate);
    long start = System.nanoTime();
    long end = start + runFor.toNanos();
    long next = start + periodNanos;
    long calls = 0;
    long failures = 0;
    StringValue ping = StringValue.of("ping");
    while (calls < maxCalls && !stop.get()) {
      long now = System.nanoTime();
      if (now - end >= 0) {
        break;
      }
      if (next - now > 0) {
        try {
          TimeUnit.NANOSECONDS.sleep(Math.min(next - now, end - now));
        } catch (InterruptedException e) {
          break;
        }
        continue;
      }
      // Like a ticker, late ticks are dropped, not made up.
      next += Math.max(1, (now - next) / periodNanos + 1) * periodNanos;
      calls++;
      try {
        ClientCalls.blockingUnaryCall(
            cc,
            ECHO,
            CallOptions.DEFAULT.withDeadlineAfter(callTimeout.toNanos(), TimeUnit.NANOSECONDS),
            ping);
      } catch (StatusRuntimeException e) {
        if (stop.get()) {
          break;
        }
        failures++;
        // The exception as grpc-java prints it (code and description), and its cause, which
        // names the address a connection failed to (Netty's "Connection refused: /ip:port").
        String msg = e.toString();
        if (e.getCause() != null) {
          msg += "; cause: " + e.getCause();
        }
        log("target=" + target + " call failed: " + msg);
      }
    }
    log("target=" + target + " done: " + calls + " calls, " + failures + " failures");
    cc.shutdownNow();
    if (cz != null) {
      cz.shutdownNow();
    }
    cc.awaitTermination(2, TimeUnit.SECONDS);
  }

  /** host:port, [v6]:port, or :port (every interface, only where allowed). */
  static InetSocketAddress socketAddress(String what, String text, boolean anyHost)
      throws IOException {
    int colon = text.lastIndexOf(':');
    if (colon < 0) {
      throw new IllegalArgumentException(what + ": address " + text + ": missing port");
    }
    String host = text.substring(0, colon);
    int port;
    try {
      port = Integer.parseInt(text.substring(colon + 1));
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException(what + ": address " + text + ": bad port");
    }
    if (port < 0 || port > 65535) {
      throw new IllegalArgumentException(what + ": address " + text + ": bad port");
    }
    if (host.startsWith("[") && host.endsWith("]")) {
      host = host.substring(1, host.length() - 1);
    }
    if (host.isEmpty()) {
      if (!anyHost) {
        throw new IllegalArgumentException(what + ": address " + text + ": missing host");
      }
      return new InetSocketAddress(port);
    }
    return new InetSocketAddress(InetAddress.getByName(host), port);
  }

  /** --addresses and --addresses-file: host:port entries. */
  static List<InetSocketAddress> fixedAddresses(String list, String file) throws IOException {
    List<String> raw = new ArrayList<>();
    for (String a : list.split(",")) {
      if (!a.isBlank()) {
        raw.add(a.strip());
      }
    }
    if (!file.isEmpty()) {
      List<String> lines;
      try {
        lines = Files.readAllLines(Path.of(file), StandardCharsets.UTF_8);
      } catch (IOException e) {
        throw new IOException("--addresses-file: " + e, e);
      }
      for (String l : lines) {
        l = l.strip();
        if (!l.isEmpty() && !l.startsWith("#")) {
          raw.add(l);
        }
      }
    }
    List<InetSocketAddress> out = new ArrayList<>();
    for (String a : raw) {
      out.add(socketAddress("address", a, false));
    }
    return out;
  }

  /** A resolver of one scheme that answers every target with a fixed address list. */
  static final class FixedResolverProvider extends NameResolverProvider {
    private final String scheme;
    private final List<InetSocketAddress> addrs;

    FixedResolverProvider(String scheme, List<InetSocketAddress> addrs) {
      this.scheme = scheme;
      this.addrs = List.copyOf(addrs);
    }

    @Override
    protected boolean isAvailable() {
      return true;
    }

    @Override
    protected int priority() {
      return 10;
    }

    @Override
    public String getDefaultScheme() {
      return scheme;
    }

    @Override
    public NameResolver newNameResolver(URI uri, NameResolver.Args args) {
      if (!scheme.equals(uri.getScheme())) {
        return null;
      }
      String path = uri.getPath() == null ? "" : uri.getPath();
      String authority = path.startsWith("/") ? path.substring(1) : path;
      return new NameResolver() {
        @Override
        public String getServiceAuthority() {
          return authority;
        }

        @Override
        public void start(Listener2 listener) {
          List<EquivalentAddressGroup> groups = new ArrayList<>();
          for (InetSocketAddress a : addrs) {
            groups.add(new EquivalentAddressGroup(a));
          }
          listener.onResult(ResolutionResult.newBuilder().setAddressesOrError(StatusOr.fromValue(groups)).build());
        }

        @Override
        public void shutdown() {}
      };
    }
  }
}
