package concord.zk;

import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.BoundedExponentialBackoffRetry;
import org.apache.curator.utils.ZookeeperFactory;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.client.HostProvider;
import org.apache.zookeeper.client.ZKClientConfig;

/**
 * What the Curator programs share: PASS/FAIL lines and their count, waits on a
 * condition with a deadline, Curator clients with a recorder of their connection
 * states, and a client that tries the servers in the order given (so that a test
 * can put it on the server it is about to kill).
 */
final class Checks {
  /** Session timeout every client asks for; the server may grant less. */
  static final int SESSION_TIMEOUT_MS = 30_000;

  private final String program;
  private int passed;
  private int failed;
  private final List<CuratorFramework> clients = new ArrayList<>();

  Checks(String program) {
    this.program = program;
  }

  void pass(String name) {
    passed++;
    System.out.println("PASS " + program + " " + name);
  }

  void fail(String name, String why) {
    failed++;
    System.out.println("FAIL " + program + " " + name + ": " + why);
  }

  /** PASS or FAIL `name` as `ok` says; `why` explains a failure. */
  boolean check(String name, boolean ok, String why) {
    if (ok) {
      pass(name);
    } else {
      fail(name, why);
    }
    return ok;
  }

  /** A check whose body may throw: an exception is its failure. */
  interface Body {
    void run() throws Exception;
  }

  void run(String name, Body body) {
    try {
      body.run();
    } catch (Throwable e) {
      fail(name, "threw " + e);
      e.printStackTrace();
    }
  }

  /** Waits until `condition` holds, polling every 20 ms; false if the deadline passed. */
  static boolean await(long timeoutMs, BooleanSupplier condition) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        return condition.getAsBoolean();
      }
      Thread.sleep(20);
    }
    return true;
  }

  /** Prints the count line, closes every client and exits 1 if any check failed. */
  void finish() {
    for (CuratorFramework c : clients) {
      try {
        c.close();
      } catch (Throwable e) {
        System.err.println("closing a client: " + e);
      }
    }
    System.out.println(program + ": " + passed + " passed, " + failed + " failed");
    System.out.flush();
    System.exit(failed == 0 && passed > 0 ? 0 : 1);
  }

  /** The connection states one client went through, in order. */
  static final class States {
    private final List<ConnectionState> seen = new ArrayList<>();

    synchronized void add(ConnectionState s) {
      seen.add(s);
    }

    synchronized List<ConnectionState> list() {
      return new ArrayList<>(seen);
    }

    synchronized boolean contains(ConnectionState s) {
      return seen.contains(s);
    }

    /** Whether `later` was seen after the first `first`. */
    synchronized boolean seenAfter(ConnectionState first, ConnectionState later) {
      int i = seen.indexOf(first);
      return i >= 0 && seen.subList(i + 1, seen.size()).contains(later);
    }
  }

  /** A started client on `connect`, connected (or a failed check and an exception). */
  CuratorFramework client(String connect, States states) throws Exception {
    return start(builder(connect), states);
  }

  /**
   * A started client that tries the servers of `connect` in the order given, starting
   * again from the first after the last, instead of ZooKeeper's shuffled order.
   */
  CuratorFramework orderedClient(String connect, States states) throws Exception {
    ZookeeperFactory factory =
        new ZookeeperFactory() {
          @Override
          public ZooKeeper newZooKeeper(
              String connectString, int sessionTimeout, Watcher watcher, boolean canBeReadOnly)
              throws Exception {
            return new ZooKeeper(
                connectString, sessionTimeout, watcher, canBeReadOnly, new Ordered(connectString));
          }

          @Override
          public ZooKeeper newZooKeeper(
              String connectString,
              int sessionTimeout,
              Watcher watcher,
              boolean canBeReadOnly,
              ZKClientConfig config)
              throws Exception {
            return new ZooKeeper(
                connectString,
                sessionTimeout,
                watcher,
                canBeReadOnly,
                new Ordered(connectString),
                config);
          }
        };
    return start(builder(connect).zookeeperFactory(factory), states);
  }

  private static CuratorFrameworkFactory.Builder builder(String connect) {
    return CuratorFrameworkFactory.builder()
        .connectString(connect)
        .sessionTimeoutMs(SESSION_TIMEOUT_MS)
        .connectionTimeoutMs(10_000)
        .retryPolicy(new BoundedExponentialBackoffRetry(100, 2_000, 29));
  }

  private CuratorFramework start(CuratorFrameworkFactory.Builder b, States states)
      throws Exception {
    CuratorFramework c = b.build();
    if (states != null) {
      c.getConnectionStateListenable().addListener((client, s) -> states.add(s));
    }
    clients.add(c);
    c.start();
    if (!c.blockUntilConnected(30, TimeUnit.SECONDS)) {
      throw new IllegalStateException("no connection within 30 s");
    }
    return c;
  }

  /** The server a client's connection is to, as ZooKeeper's toString names it. */
  static String remoteServer(CuratorFramework c) throws Exception {
    String s = c.getZookeeperClient().getZooKeeper().toString();
    int at = s.indexOf("remoteserver:");
    if (at < 0) {
      return "";
    }
    String rest = s.substring(at + "remoteserver:".length());
    int end = rest.indexOf(' ');
    return end < 0 ? rest : rest.substring(0, end);
  }

  /** The servers of a connect string in its own order, round and round. */
  private static final class Ordered implements HostProvider {
    private final List<InetSocketAddress> servers = new ArrayList<>();
    private int next;
    private int sinceConnected;

    Ordered(String connect) {
      for (String hp : connect.split(",")) {
        int colon = hp.lastIndexOf(':');
        servers.add(
            InetSocketAddress.createUnresolved(
                hp.substring(0, colon), Integer.parseInt(hp.substring(colon + 1))));
      }
    }

    @Override
    public synchronized int size() {
      return servers.size();
    }

    @Override
    public InetSocketAddress next(long spinDelay) {
      InetSocketAddress a;
      boolean wrapped;
      synchronized (this) {
        a = servers.get(next);
        next = (next + 1) % servers.size();
        sinceConnected++;
        wrapped = sinceConnected > servers.size();
      }
      if (wrapped && spinDelay > 0) {
        // Every server tried since the last connection: pause, as ZooKeeper's own
        // provider does, instead of spinning.
        try {
          Thread.sleep(spinDelay);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
      return new InetSocketAddress(a.getHostString(), a.getPort());
    }

    @Override
    public synchronized void onConnected() {
      sinceConnected = 0;
    }

    @Override
    public boolean updateServerList(
        java.util.Collection<InetSocketAddress> serverAddresses, InetSocketAddress current) {
      return false;
    }
  }
}
