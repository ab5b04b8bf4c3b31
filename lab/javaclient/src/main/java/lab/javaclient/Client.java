package lab.javaclient;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.net.ConnectException;
import java.net.InetAddress;
import java.net.Proxy;
import java.net.SocketException;
import java.net.SocketTimeoutException;
import java.net.UnknownHostException;
import java.security.Security;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import okhttp3.ConnectionPool;
import okhttp3.OkHttpClient;
import okhttp3.Request;
import okhttp3.Response;
import okhttp3.ResponseBody;

/**
 * The lab's JVM client: calls the pods of a Service the way a Java service with client-side load
 * balancing does, and keeps every stale copy such a service keeps.
 *
 * <ul>
 *   <li>{@code --mode dns}: resolves a (headless) Service name with {@link
 *       InetAddress#getAllByName}, cached by the JVM for {@code networkaddress.cache.ttl} seconds
 *       ({@code --jvm-ttl}, set as a Security property before the first lookup), and calls the
 *       answers round robin;
 *   <li>{@code --mode registry}: keeps its own instance list, fetched every {@code
 *       --registry-refresh} seconds from a registry speaking Nacos's {@code
 *       /nacos/v1/ns/instance/list}, and calls it round robin;
 *   <li>calls go through OkHttp with a keep-alive connection pool ({@code --pool-size}, {@code
 *       --pool-idle}; {@code --no-pool} closes every connection after its call), without OkHttp's
 *       silent retry ({@code --retry} turns it on), as a service that throws on the first failure.
 * </ul>
 *
 * <p>Every failure is logged with the real Java exception text and a UTC timestamp, in the shape
 * of a logback line; the last line of stdout is one JSON summary (counts by error kind and by
 * target IP). Calls are bounded by {@code --duration} and {@code --max-calls}, and only go to
 * addresses inside {@code --allow} (default: the lab's pod CIDR).
 */
public final class Client {
  private static final DateTimeFormatter TS =
      DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm:ss.SSS").withZone(ZoneOffset.UTC);
  private static final String LOGGER = "l.j.Client";
  private static final ObjectMapper JSON = new ObjectMapper();

  private Client() {}

  /** Command-line settings. */
  static final class Config {
    String mode = "dns";
    String name = "backend.javademo.svc.cluster.local";
    int port = 8080;
    String path = "/";
    int jvmTtl = 30;
    int jvmNegativeTtl = 10;
    String registry = "http://127.0.0.1:8848";
    String service = "backend";
    int registryRefresh = 10;
    boolean pool = true;
    int poolSize = 5;
    int poolIdle = 300;
    boolean retry = false;
    int threads = 4;
    int intervalMs = 100;
    int connectTimeoutMs = 1000;
    int readTimeoutMs = 10000;
    int durationS = 90;
    long maxCalls = 3000;
    List<Cidr> allow = new ArrayList<>(List.of(Cidr.parse("10.244.0.0/16")));
    boolean logOk = false;
  }

  private static final String USAGE =
      String.join(
          "\n",
          "usage: java -jar javaclient.jar [flags]",
          "  --mode dns|registry      where the target IPs come from (default dns)",
          "  --name NAME              dns: the Service name to resolve (default"
              + " backend.javademo.svc.cluster.local)",
          "  --port N                 TCP port of every call (default 8080)",
          "  --path PATH              HTTP path (default /)",
          "  --jvm-ttl N              dns: networkaddress.cache.ttl in seconds (default 30; 0 = no"
              + " cache)",
          "  --jvm-negative-ttl N     dns: networkaddress.cache.negative.ttl (default 10)",
          "  --registry URL           registry: base URL of the registry (default"
              + " http://127.0.0.1:8848)",
          "  --service NAME           registry: service name (default backend)",
          "  --registry-refresh N     registry: seconds between two fetches of the instance list"
              + " (default 10)",
          "  --no-pool                close every connection after its call (no keep-alive reuse)",
          "  --pool-size N            idle connections kept per pool (default 5)",
          "  --pool-idle N            seconds an idle pooled connection is kept (default 300)",
          "  --retry                  OkHttp's retryOnConnectionFailure (default off: first failure"
              + " is thrown)",
          "  --threads N              concurrent callers (default 4)",
          "  --interval-ms N          pause of each caller between two calls (default 100)",
          "  --connect-timeout-ms N   connect timeout (default 1000)",
          "  --read-timeout-ms N      read timeout (default 10000)",
          "  --duration S             stop after S seconds (default 90, at most 600)",
          "  --max-calls N            stop after N calls (default 3000, at most 100000)",
          "  --allow CIDR[,CIDR]      addresses the client may call (default 10.244.0.0/16)",
          "  --log-ok                 also log every successful call (INFO)",
          "  -h, --help               this text");

  /** An IPv4 prefix. */
  record Cidr(int addr, int bits) {
    static Cidr parse(String s) {
      String[] p = s.trim().split("/", 2);
      int bits = p.length == 2 ? Integer.parseInt(p[1]) : 32;
      String[] o = p[0].split("\\.");
      if (o.length != 4 || bits < 0 || bits > 32) {
        throw new IllegalArgumentException("not an IPv4 CIDR: " + s);
      }
      int a = 0;
      for (String x : o) {
        int v = Integer.parseInt(x);
        if (v < 0 || v > 255) {
          throw new IllegalArgumentException("not an IPv4 CIDR: " + s);
        }
        a = (a << 8) | v;
      }
      return new Cidr(a, bits);
    }

    boolean contains(InetAddress ip) {
      byte[] b = ip.getAddress();
      if (b.length != 4) {
        return false;
      }
      int a = ((b[0] & 0xff) << 24) | ((b[1] & 0xff) << 16) | ((b[2] & 0xff) << 8) | (b[3] & 0xff);
      int mask = bits == 0 ? 0 : -1 << (32 - bits);
      return (a & mask) == (addr & mask);
    }
  }

  private static final List<String> VALUE_FLAGS =
      List.of(
          "--mode", "--name", "--port", "--path", "--jvm-ttl", "--jvm-negative-ttl", "--registry",
          "--service", "--registry-refresh", "--pool-size", "--pool-idle", "--threads",
          "--interval-ms", "--connect-timeout-ms", "--read-timeout-ms", "--duration", "--max-calls",
          "--allow");

  static Config parse(String[] args) {
    Config c = new Config();
    for (int i = 0; i < args.length; i++) {
      String a = args[i];
      String v = null;
      int eq = a.indexOf('=');
      if (a.startsWith("--") && eq > 0) {
        v = a.substring(eq + 1);
        a = a.substring(0, eq);
      }
      switch (a) {
        case "-h", "--help" -> {
          System.out.println(USAGE);
          System.exit(0);
        }
        case "--no-pool" -> c.pool = false;
        case "--retry" -> c.retry = true;
        case "--log-ok" -> c.logOk = true;
        default -> {
          if (!VALUE_FLAGS.contains(a)) {
            throw new IllegalArgumentException("unknown flag " + a + " (see --help)");
          }
          if (v == null) {
            if (i + 1 >= args.length) {
              throw new IllegalArgumentException(a + " needs a value");
            }
            v = args[++i];
          }
          switch (a) {
            case "--mode" -> c.mode = v;
            case "--name" -> c.name = v;
            case "--port" -> c.port = range(a, v, 1, 65535);
            case "--path" -> c.path = v.startsWith("/") ? v : "/" + v;
            case "--jvm-ttl" -> c.jvmTtl = range(a, v, 0, 3600);
            case "--jvm-negative-ttl" -> c.jvmNegativeTtl = range(a, v, 0, 3600);
            case "--registry" -> c.registry = v.replaceAll("/+$", "");
            case "--service" -> c.service = v;
            case "--registry-refresh" -> c.registryRefresh = range(a, v, 1, 600);
            case "--pool-size" -> c.poolSize = range(a, v, 1, 100);
            case "--pool-idle" -> c.poolIdle = range(a, v, 1, 3600);
            case "--threads" -> c.threads = range(a, v, 1, 32);
            case "--interval-ms" -> c.intervalMs = range(a, v, 1, 60000);
            case "--connect-timeout-ms" -> c.connectTimeoutMs = range(a, v, 1, 60000);
            case "--read-timeout-ms" -> c.readTimeoutMs = range(a, v, 1, 120000);
            case "--duration" -> c.durationS = range(a, v, 1, 600);
            case "--max-calls" -> c.maxCalls = range(a, v, 1, 100000);
            case "--allow" -> {
              c.allow.clear();
              for (String s : v.split(",")) {
                c.allow.add(Cidr.parse(s));
              }
            }
            default -> throw new IllegalArgumentException("unknown flag " + a + " (see --help)");
          }
        }
      }
    }
    if (!c.mode.equals("dns") && !c.mode.equals("registry")) {
      throw new IllegalArgumentException("--mode must be dns or registry, not " + c.mode);
    }
    return c;
  }

  private static int range(String flag, String v, int lo, int hi) {
    int n;
    try {
      n = Integer.parseInt(v.trim());
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException(flag + " wants a number, not " + v);
    }
    if (n < lo || n > hi) {
      throw new IllegalArgumentException(flag + " must be " + lo + ".." + hi + ", not " + n);
    }
    return n;
  }

  // ---------------------------------------------------------------------------------------------
  // Logging, in logback's default shape: "2026-12-03 08:44:01.123 WARN  [call-1] l.j.Client - …".

  static synchronized void log(String level, String msg, Throwable t) {
    StringBuilder b = new StringBuilder(256);
    b.append(TS.format(Instant.now()))
        .append(' ')
        .append(String.format("%-5s", level))
        .append(" [")
        .append(Thread.currentThread().getName())
        .append("] ")
        .append(LOGGER)
        .append(" - ")
        .append(msg);
    if (t != null) {
      b.append(": ").append(t);
      appendFrames(b, t, 3);
      List<Throwable> seen = new ArrayList<>();
      seen.add(t);
      for (Throwable c = t.getCause(); c != null && !seen.contains(c); c = c.getCause()) {
        seen.add(c);
        b.append("\nCaused by: ").append(c);
        appendFrames(b, c, 2);
      }
    }
    System.out.println(b);
    System.out.flush();
  }

  /** The first {@code n} stack frames, then "... N more", as logback prints a short trace. */
  private static void appendFrames(StringBuilder b, Throwable t, int n) {
    StackTraceElement[] st = t.getStackTrace();
    for (int i = 0; i < Math.min(n, st.length); i++) {
      b.append("\n\tat ").append(st[i]);
    }
    if (st.length > n) {
      b.append("\n\t... ").append(st.length - n).append(" more");
    }
  }

  static void info(String msg) {
    log("INFO", msg, null);
  }

  // ---------------------------------------------------------------------------------------------
  // Where the target IPs come from.

  interface Source {
    /** The current targets (possibly stale: that is the point). */
    List<InetAddress> current();

    default void close() {}
  }

  /** The JVM's resolver and its address cache. */
  static final class DnsSource implements Source {
    private final String name;
    private List<String> last = List.of();

    DnsSource(String name) {
      this.name = name;
    }

    @Override
    public synchronized List<InetAddress> current() {
      try {
        InetAddress[] all = InetAddress.getAllByName(name);
        List<InetAddress> out = new ArrayList<>(List.of(all));
        List<String> ips = new ArrayList<>();
        for (InetAddress a : out) {
          ips.add(a.getHostAddress());
        }
        Collections.sort(ips);
        if (!ips.equals(last)) {
          info(
              "resolved "
                  + name
                  + " -> "
                  + ips
                  + " (networkaddress.cache.ttl="
                  + Security.getProperty("networkaddress.cache.ttl")
                  + ")");
          last = ips;
        }
        return out;
      } catch (UnknownHostException e) {
        log("WARN", "resolving " + name + " failed", e);
        return List.of();
      }
    }
  }

  /** A Nacos-style instance list, refreshed every few seconds by a background thread. */
  static final class RegistrySource implements Source {
    private final OkHttpClient http;
    private final String url;
    private final int refreshS;
    private final Thread thread;
    private final AtomicBoolean running = new AtomicBoolean(true);
    private volatile List<InetAddress> hosts = List.of();

    RegistrySource(Config c) {
      this.http =
          new OkHttpClient.Builder()
              .proxy(Proxy.NO_PROXY)
              .connectTimeout(1, TimeUnit.SECONDS)
              .readTimeout(2, TimeUnit.SECONDS)
              .callTimeout(3, TimeUnit.SECONDS)
              .build();
      this.url = c.registry + "/nacos/v1/ns/instance/list?serviceName=" + c.service;
      this.refreshS = c.registryRefresh;
      fetch();
      this.thread = new Thread(this::loop, "registry-refresh");
      this.thread.setDaemon(true);
      this.thread.start();
    }

    private void loop() {
      while (running.get()) {
        try {
          Thread.sleep(refreshS * 1000L);
        } catch (InterruptedException e) {
          return;
        }
        fetch();
      }
    }

    private void fetch() {
      Request req = new Request.Builder().url(url).build();
      try (Response r = http.newCall(req).execute()) {
        ResponseBody body = r.body();
        if (!r.isSuccessful() || body == null) {
          log("WARN", "registry " + url + " answered HTTP " + r.code(), null);
          return;
        }
        JsonNode doc = JSON.readTree(body.string());
        List<InetAddress> out = new ArrayList<>();
        List<String> ips = new ArrayList<>();
        for (JsonNode h : doc.path("hosts")) {
          if (h.path("healthy").asBoolean(true) && h.path("enabled").asBoolean(true)) {
            String ip = h.path("ip").asText();
            out.add(InetAddress.getByName(ip));
            ips.add(ip);
          }
        }
        Collections.sort(ips);
        List<String> before = new ArrayList<>();
        for (InetAddress a : hosts) {
          before.add(a.getHostAddress());
        }
        Collections.sort(before);
        if (!ips.equals(before)) {
          info("instance list of " + doc.path("name").asText("?") + " from registry -> " + ips);
        }
        hosts = List.copyOf(out);
      } catch (IOException e) {
        log("WARN", "fetching instances from " + url + " failed", e);
      }
    }

    @Override
    public List<InetAddress> current() {
      return hosts;
    }

    @Override
    public void close() {
      running.set(false);
      thread.interrupt();
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Counting.

  static final String[] KINDS = {"refused", "reset", "timeout", "other"};

  /** The kind of a call failure, from the exception chain (the OS's error text). */
  static String kind(Throwable t) {
    Throwable c = t;
    for (int depth = 0; c != null && depth < 20; depth++, c = c.getCause()) {
      String m = String.valueOf(c.getMessage());
      if (c instanceof ConnectException && m.contains("Connection refused")) {
        return "refused";
      }
      if (c instanceof SocketException && m.contains("Connection reset")) {
        return "reset";
      }
      if (c instanceof SocketTimeoutException
          || (c instanceof InterruptedIOException && m.contains("timeout"))) {
        return "timeout";
      }
    }
    return "other";
  }

  /** Counts per target address; call times are starts, error times are ends (the log's). */
  static final class Target {
    long ok;
    final long[] errors = new long[KINDS.length];
    long firstCallMs;
    long lastCallMs;
    long lastEndMs;
    long firstErrorMs;
    long lastErrorMs;
  }

  static final class Stats {
    private final Map<String, Target> byTarget = new TreeMap<>();
    final long[] errors = new long[KINDS.length];
    long ok;
    long calls;

    /** One call to {@code target}, started at {@code t0}, ended at {@code t1}; kind null: ok. */
    synchronized void record(String target, long t0, long t1, String kind) {
      calls++;
      Target t = byTarget.computeIfAbsent(target, k -> new Target());
      if (t.firstCallMs == 0 || t0 < t.firstCallMs) {
        t.firstCallMs = t0;
      }
      t.lastCallMs = Math.max(t.lastCallMs, t0);
      t.lastEndMs = Math.max(t.lastEndMs, t1);
      if (kind == null) {
        ok++;
        t.ok++;
        return;
      }
      int k = List.of(KINDS).indexOf(kind);
      errors[k]++;
      t.errors[k]++;
      if (t.firstErrorMs == 0 || t1 < t.firstErrorMs) {
        t.firstErrorMs = t1;
      }
      t.lastErrorMs = Math.max(t.lastErrorMs, t1);
    }

    synchronized Map<String, Object> summary(Config c, long startMs) {
      Map<String, Object> s = new LinkedHashMap<>();
      s.put("summary", "javaclient");
      s.put("mode", c.mode);
      s.put("pool", c.pool);
      if (c.mode.equals("dns")) {
        s.put("name", c.name);
        s.put("jvm_ttl_s", c.jvmTtl);
      } else {
        s.put("registry", c.registry);
        s.put("service", c.service);
        s.put("registry_refresh_s", c.registryRefresh);
      }
      s.put("start_unix_ms", startMs);
      s.put("end_unix_ms", System.currentTimeMillis());
      s.put("calls", calls);
      s.put("ok", ok);
      Map<String, Long> e = new LinkedHashMap<>();
      long failed = 0;
      for (int i = 0; i < KINDS.length; i++) {
        e.put(KINDS[i], errors[i]);
        failed += errors[i];
      }
      s.put("failed", failed);
      s.put("errors", e);
      Map<String, Object> bt = new LinkedHashMap<>();
      for (Map.Entry<String, Target> en : byTarget.entrySet()) {
        Target t = en.getValue();
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("ok", t.ok);
        for (int i = 0; i < KINDS.length; i++) {
          m.put(KINDS[i], t.errors[i]);
        }
        m.put("first_call_unix_ms", t.firstCallMs);
        m.put("last_call_unix_ms", t.lastCallMs);
        m.put("last_end_unix_ms", t.lastEndMs);
        if (t.firstErrorMs != 0) {
          m.put("first_error_unix_ms", t.firstErrorMs);
          m.put("last_error_unix_ms", t.lastErrorMs);
        }
        bt.put(en.getKey(), m);
      }
      s.put("by_target", bt);
      return s;
    }
  }

  // ---------------------------------------------------------------------------------------------

  public static void main(String[] args) throws Exception {
    Config c;
    try {
      c = parse(args);
    } catch (IllegalArgumentException e) {
      System.err.println("javaclient: " + e.getMessage());
      System.exit(2);
      return;
    }
    // Read once, by the first lookup: set before anything resolves a name.
    Security.setProperty("networkaddress.cache.ttl", Integer.toString(c.jvmTtl));
    Security.setProperty("networkaddress.cache.negative.ttl", Integer.toString(c.jvmNegativeTtl));
    if (c.mode.equals("registry")) {
      InetAddress host = InetAddress.getByName(okhttp3.HttpUrl.get(c.registry + "/").host());
      if (!host.isLoopbackAddress() && c.allow.stream().noneMatch(a -> a.contains(host))) {
        System.err.println("javaclient: --registry must be on loopback or inside --allow");
        System.exit(2);
      }
    }
    run(c);
  }

  static void run(Config c) throws InterruptedException {
    long startMs = System.currentTimeMillis();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(c.durationS);
    ConnectionPool pool =
        c.pool
            ? new ConnectionPool(c.poolSize, c.poolIdle, TimeUnit.SECONDS)
            : new ConnectionPool(0, 1, TimeUnit.MILLISECONDS);
    OkHttpClient http =
        new OkHttpClient.Builder()
            .proxy(Proxy.NO_PROXY)
            .connectionPool(pool)
            .retryOnConnectionFailure(c.retry)
            .followRedirects(false)
            .connectTimeout(c.connectTimeoutMs, TimeUnit.MILLISECONDS)
            .readTimeout(c.readTimeoutMs, TimeUnit.MILLISECONDS)
            .writeTimeout(c.readTimeoutMs, TimeUnit.MILLISECONDS)
            .build();
    info(
        "starting: mode="
            + c.mode
            + (c.mode.equals("dns")
                ? " name=" + c.name + " networkaddress.cache.ttl=" + c.jvmTtl
                : " registry=" + c.registry + " service=" + c.service + " refresh=" + c.registryRefresh + "s")
            + " port="
            + c.port
            + " pool="
            + (c.pool ? "maxIdle " + c.poolSize + ", keepAlive " + c.poolIdle + "s" : "off")
            + " retryOnConnectionFailure="
            + c.retry
            + " threads="
            + c.threads
            + " duration="
            + c.durationS
            + "s maxCalls="
            + c.maxCalls);
    Source source = c.mode.equals("dns") ? new DnsSource(c.name) : new RegistrySource(c);
    Stats stats = new Stats();
    AtomicLong started = new AtomicLong();
    AtomicLong next = new AtomicLong();
    AtomicBoolean running = new AtomicBoolean(true);
    AtomicBoolean printed = new AtomicBoolean(false);
    List<Thread> workers = new ArrayList<>();
    for (int w = 0; w < c.threads; w++) {
      Thread t =
          new Thread(
              () -> {
                while (running.get() && System.nanoTime() < deadline) {
                  if (started.incrementAndGet() > c.maxCalls) {
                    break;
                  }
                  List<InetAddress> ips = source.current();
                  if (!ips.isEmpty()) {
                    InetAddress ip = ips.get((int) Math.floorMod(next.getAndIncrement(), (long) ips.size()));
                    if (c.allow.stream().noneMatch(a -> a.contains(ip))) {
                      log("ERROR", "not calling " + ip.getHostAddress() + ": outside --allow", null);
                    } else {
                      call(http, c, ip, stats);
                    }
                  }
                  try {
                    Thread.sleep(c.intervalMs);
                  } catch (InterruptedException e) {
                    return;
                  }
                }
              },
              "call-" + (w + 1));
      workers.add(t);
    }
    Runnable finish =
        () -> {
          if (printed.compareAndSet(false, true)) {
            running.set(false);
            source.close();
            for (Thread t : workers) {
              try {
                t.join(Math.max(1000, c.readTimeoutMs + 1000L));
              } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
              }
            }
            http.connectionPool().evictAll();
            Map<String, Object> s = stats.summary(c, startMs);
            info("done: " + stats.calls + " calls, " + s.get("failed") + " failed");
            try {
              System.out.println(JSON.writeValueAsString(s));
            } catch (IOException e) {
              System.out.println("{\"summary\":\"javaclient\",\"error\":\"" + e + "\"}");
            }
            System.out.flush();
          }
        };
    // SIGTERM/SIGINT still print the summary.
    Runtime.getRuntime().addShutdownHook(new Thread(finish, "shutdown"));
    for (Thread t : workers) {
      t.start();
    }
    for (Thread t : workers) {
      t.join();
    }
    finish.run();
    http.dispatcher().executorService().shutdown();
  }

  static void call(OkHttpClient http, Config c, InetAddress ip, Stats stats) {
    String url = "http://" + ip.getHostAddress() + ":" + c.port + c.path;
    Request.Builder rb = new Request.Builder().url(url);
    if (!c.pool) {
      rb.header("Connection", "close");
    }
    long t0 = System.currentTimeMillis();
    String target = ip.getHostAddress() + ":" + c.port;
    try (Response r = http.newCall(rb.build()).execute()) {
      ResponseBody body = r.body();
      if (body != null) {
        body.string();
      }
      if (!r.isSuccessful()) {
        log("WARN", "call to " + url + " failed: HTTP " + r.code(), null);
        stats.record(target, t0, System.currentTimeMillis(), "other");
        return;
      }
      if (c.logOk) {
        info("call to " + url + " ok");
      }
      stats.record(target, t0, System.currentTimeMillis(), null);
    } catch (IOException e) {
      long t1 = System.currentTimeMillis();
      log("WARN", "call to " + url + " failed", e);
      stats.record(target, t0, t1, kind(e));
    }
  }
}
