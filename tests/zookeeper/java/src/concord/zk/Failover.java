package concord.zk;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.zookeeper.CreateMode;

/**
 * Curator clients working while the server one of them is connected to, the
 * leader, is killed with kill -9 by the caller.
 *
 * <pre>java concord.zk.Failover CONNECT LEADER_HOST:PORT</pre>
 *
 * The watched client tries LEADER_HOST:PORT first (and the rest of CONNECT after
 * it); two more clients use CONNECT as given. All three contend for an
 * InterProcessMutex, and two hold LeaderLatches; the watched client owns an
 * ephemeral node. Once the work runs and the watched client is on the leader it
 * prints "KILL NOW" and waits (bounded) for the caller to kill that server; then it
 * checks: the watched client's states went SUSPENDED then RECONNECTED and no client's
 * LOST; its session id and ephemeral node survived; the mutex never had two holders
 * and kept being taken after the failover; exactly one latch leads; a CuratorCache
 * sees a write made after the failover.
 */
public final class Failover {
  private static final long WAIT_MS = 60_000;

  public static void main(String[] args) throws Exception {
    if (args.length != 2) {
      System.err.println("usage: Failover HOST:PORT[,HOST:PORT...] LEADER_HOST:PORT");
      System.exit(2);
    }
    Checks checks = new Checks("failover");
    checks.run("failover", () -> run(checks, args[0], args[1]));
    checks.finish();
  }

  private static String leaderFirst(String connect, String leader) {
    List<String> rest = new ArrayList<>();
    rest.add(leader);
    for (String s : connect.split(",")) {
      if (!s.equals(leader)) {
        rest.add(s);
      }
    }
    return String.join(",", rest);
  }

  private static void run(Checks checks, String connect, String leader) throws Exception {
    String base = "/curator-failover-" + System.currentTimeMillis();
    Checks.States watchedStates = new Checks.States();
    CuratorFramework watched = checks.orderedClient(leaderFirst(connect, leader), watchedStates);
    List<Checks.States> otherStates = List.of(new Checks.States(), new Checks.States());
    List<CuratorFramework> clients = new ArrayList<>();
    clients.add(watched);
    for (Checks.States s : otherStates) {
      clients.add(checks.client(connect, s));
    }
    String on = Checks.remoteServer(watched);
    if (!checks.check("the watched client is on the leader", on.endsWith(leader), "it is on '" + on + "', not " + leader)) {
      return;
    }
    long session = watched.getZookeeperClient().getZooKeeper().getSessionId();
    String ephemeral = base + "/ephemeral";
    watched.create().creatingParentsIfNeeded().withMode(CreateMode.EPHEMERAL).forPath(ephemeral);

    // Mutex work on every client, two threads each, until told to stop.
    AtomicBoolean stop = new AtomicBoolean();
    AtomicInteger inside = new AtomicInteger();
    AtomicInteger overlaps = new AtomicInteger();
    AtomicInteger turns = new AtomicInteger();
    List<String> errors = new CopyOnWriteArrayList<>();
    List<Thread> threads = new ArrayList<>();
    for (CuratorFramework c : clients) {
      for (int t = 0; t < 2; t++) {
        InterProcessMutex m = new InterProcessMutex(c, base + "/mutex");
        threads.add(new Thread(() -> contend(m, stop, inside, overlaps, turns, errors)));
      }
    }
    threads.forEach(Thread::start);
    LeaderLatch latchA = new LeaderLatch(watched, base + "/latch", "watched");
    LeaderLatch latchB = new LeaderLatch(clients.get(1), base + "/latch", "other");
    latchA.start();
    latchB.start();
    checks.check(
        "a latch leads before the kill",
        Checks.await(WAIT_MS, () -> latchA.hasLeadership() != latchB.hasLeadership()),
        "watched " + latchA.hasLeadership() + ", other " + latchB.hasLeadership());
    checks.check("the mutex is taken before the kill", Checks.await(WAIT_MS, () -> turns.get() >= 20), turns.get() + " turns");

    System.out.println("KILL NOW " + leader);
    System.out.flush();
    boolean suspended = Checks.await(WAIT_MS, () -> watchedStates.contains(ConnectionState.SUSPENDED));
    checks.check("the watched client is SUSPENDED after the kill", suspended, "states " + watchedStates.list());
    if (!suspended) {
      stop.set(true);
      return;
    }
    long suspendedAt = System.nanoTime();
    boolean reconnected =
        Checks.await(WAIT_MS, () -> watchedStates.seenAfter(ConnectionState.SUSPENDED, ConnectionState.RECONNECTED));
    System.out.printf(
        "the watched client was suspended for %d ms%n",
        TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - suspendedAt));
    checks.check("then RECONNECTED", reconnected, "states " + watchedStates.list());
    int turnsAtReconnect = turns.get();
    boolean progress = Checks.await(WAIT_MS, () -> turns.get() >= turnsAtReconnect + 20);
    checks.check("the mutex is taken after the failover", progress, (turns.get() - turnsAtReconnect) + " turns after it");
    stop.set(true);
    for (Thread t : threads) {
      t.join(WAIT_MS);
    }
    checks.check("the mutex never had two holders", overlaps.get() == 0, overlaps.get() + " overlaps");
    checks.check("no mutex errors", errors.isEmpty(), errors.toString());
    checks.check(
        "the watched client kept its session",
        watched.getZookeeperClient().getZooKeeper().getSessionId() == session,
        String.format("0x%x became 0x%x", session, watched.getZookeeperClient().getZooKeeper().getSessionId()));
    checks.check(
        "its ephemeral node is still there, seen by another client",
        clients.get(2).checkExists().forPath(ephemeral) != null,
        "gone");
    checks.check(
        "exactly one latch leads after the failover",
        Checks.await(WAIT_MS, () -> latchA.hasLeadership() != latchB.hasLeadership()),
        "watched " + latchA.hasLeadership() + ", other " + latchB.hasLeadership());

    List<String> events = new CopyOnWriteArrayList<>();
    CuratorCache cache = CuratorCache.build(clients.get(1), base + "/cache");
    cache.listenable().addListener(CuratorCacheListener.builder().forCreates(d -> events.add(d.getPath())).build());
    cache.start();
    watched.create().creatingParentsIfNeeded().forPath(base + "/cache/after", "x".getBytes(StandardCharsets.UTF_8));
    checks.check(
        "a cache sees a write made after the failover",
        Checks.await(WAIT_MS, () -> events.contains(base + "/cache/after")),
        "events " + events);
    cache.close();
    latchA.close();
    latchB.close();

    checks.check(
        "the watched client's states: SUSPENDED then RECONNECTED, never LOST",
        !watchedStates.contains(ConnectionState.LOST),
        "states " + watchedStates.list());
    for (int i = 0; i < otherStates.size(); i++) {
      checks.check(
          "client " + (i + 2) + " never LOST",
          !otherStates.get(i).contains(ConnectionState.LOST),
          "states " + otherStates.get(i).list());
    }
    System.out.println("states: watched " + watchedStates.list() + ", others " + otherStates.get(0).list() + " " + otherStates.get(1).list());
  }

  private static void contend(
      InterProcessMutex m,
      AtomicBoolean stop,
      AtomicInteger inside,
      AtomicInteger overlaps,
      AtomicInteger turns,
      List<String> errors) {
    while (!stop.get()) {
      try {
        if (!m.acquire(WAIT_MS, TimeUnit.MILLISECONDS)) {
          errors.add("acquire timed out after " + WAIT_MS + " ms");
          return;
        }
        try {
          if (inside.incrementAndGet() > 1) {
            overlaps.incrementAndGet();
          }
          Thread.sleep(2);
          inside.decrementAndGet();
        } finally {
          m.release();
        }
        turns.incrementAndGet();
      } catch (Exception e) {
        // A failover may fail an acquire or a release with a connection error; the
        // recipe's own retries cover most, and what is left is counted, not fatal,
        // unless it keeps happening (then no progress is made and a check fails).
        errors.add(e.toString());
        if (errors.size() > 50) {
          return;
        }
      }
    }
  }
}
