package concord.zk;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Collectors;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.cache.ChildData;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.x.discovery.ServiceDiscovery;
import org.apache.curator.x.discovery.ServiceDiscoveryBuilder;
import org.apache.curator.x.discovery.ServiceInstance;
import org.apache.curator.x.discovery.details.JsonInstanceSerializer;
import org.apache.zookeeper.AddWatchMode;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;

/**
 * Curator 5's recipes against a connect string, each with several clients (one
 * connection each, as separate processes would have): LeaderLatch, LeaderSelector,
 * InterProcessMutex, InterProcessSemaphoreV2, CuratorCache and curator-x-discovery's
 * ServiceDiscovery. Every wait has a deadline.
 *
 * <pre>java concord.zk.Recipes HOST:PORT[,HOST:PORT...] [BASE_PATH]</pre>
 *
 * Prints a PASS or FAIL line per check and "recipes: N passed, N failed"; exits 1 on
 * any failure.
 */
public final class Recipes {
  private static final long WAIT_MS = 30_000;

  private final Checks checks = new Checks("recipes");
  private final String connect;
  private final String base;

  private Recipes(String connect, String base) {
    this.connect = connect;
    this.base = base;
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 1) {
      System.err.println("usage: Recipes HOST:PORT[,HOST:PORT...] [BASE_PATH]");
      System.exit(2);
    }
    String base = args.length > 1 ? args[1] : "/curator-recipes-" + System.currentTimeMillis();
    Recipes r = new Recipes(args[0], base);
    r.checks.run("leader latch", r::leaderLatch);
    r.checks.run("leader selector", r::leaderSelector);
    r.checks.run("mutex re-entrant", r::mutexReentrant);
    r.checks.run("mutex contention", r::mutexContention);
    r.checks.run("semaphore", r::semaphore);
    r.checks.run("addWatch", r::addWatch);
    r.checks.run("curator cache", r::curatorCache);
    r.checks.run("service discovery", r::serviceDiscovery);
    r.checks.finish();
  }

  private List<CuratorFramework> clients(int n) throws Exception {
    List<CuratorFramework> out = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      out.add(checks.client(connect, null));
    }
    return out;
  }

  private static String ids(Collection<Participant> ps) {
    return ps.stream().map(p -> p.getId() + (p.isLeader() ? "*" : "")).sorted().collect(Collectors.joining(","));
  }

  /** Three latches: one leads, all agree who, and closing it hands leadership over. */
  private void leaderLatch() throws Exception {
    String path = base + "/latch";
    List<CuratorFramework> cs = clients(3);
    List<LeaderLatch> latches = new ArrayList<>();
    for (int i = 0; i < 3; i++) {
      LeaderLatch l = new LeaderLatch(cs.get(i), path, "latch-" + i);
      l.start();
      latches.add(l);
    }
    boolean one =
        Checks.await(WAIT_MS, () -> latches.stream().filter(LeaderLatch::hasLeadership).count() == 1);
    if (!checks.check("latch: exactly one has leadership", one, "leaders: " + latches.stream().filter(LeaderLatch::hasLeadership).count())) {
      return;
    }
    LeaderLatch leader = latches.stream().filter(LeaderLatch::hasLeadership).findFirst().get();
    checks.check(
        "latch: await on the leader returns true",
        leader.await(WAIT_MS, TimeUnit.MILLISECONDS),
        "await timed out");
    LeaderLatch other = latches.stream().filter(l -> l != leader).findFirst().get();
    checks.check(
        "latch: await on a follower times out",
        !other.await(300, TimeUnit.MILLISECONDS),
        "a second latch says it leads");
    boolean agree = true;
    String why = "";
    for (LeaderLatch l : latches) {
      Participant p = l.getLeader();
      if (!p.getId().equals(leader.getId()) || !p.isLeader()) {
        agree = false;
        why += l.getId() + " sees " + p.getId() + "; ";
      }
      Collection<Participant> ps = l.getParticipants();
      if (ps.size() != 3) {
        agree = false;
        why += l.getId() + " sees participants " + ids(ps) + "; ";
      }
    }
    checks.check("latch: getLeader and getParticipants agree", agree, why);

    leader.close();
    List<LeaderLatch> rest = new ArrayList<>(latches);
    rest.remove(leader);
    boolean handed =
        Checks.await(WAIT_MS, () -> rest.stream().filter(LeaderLatch::hasLeadership).count() == 1);
    checks.check("latch: close hands leadership over", handed, "no single new leader among the other two");
    if (handed) {
      LeaderLatch next = rest.stream().filter(LeaderLatch::hasLeadership).findFirst().get();
      boolean seen =
          Checks.await(
              WAIT_MS,
              () -> {
                try {
                  return next.getLeader().getId().equals(next.getId())
                      && next.getParticipants().size() == 2;
                } catch (Exception e) {
                  return false;
                }
              });
      checks.check("latch: the new leader and two participants are seen", seen, ids(next.getParticipants()));
    }
    for (LeaderLatch l : rest) {
      l.close();
    }
  }

  /**
   * Three selectors with autoRequeue and ids: never two leading at once, each leads
   * more than once (requeued), and inside takeLeadership getLeader is itself.
   */
  private void leaderSelector() throws Exception {
    String path = base + "/selector";
    List<CuratorFramework> cs = clients(3);
    AtomicInteger leading = new AtomicInteger();
    AtomicInteger overlaps = new AtomicInteger();
    AtomicInteger turns = new AtomicInteger();
    ConcurrentHashMap<String, AtomicInteger> turnsOf = new ConcurrentHashMap<>();
    List<String> problems = new CopyOnWriteArrayList<>();
    List<LeaderSelector> selectors = new ArrayList<>();
    for (int i = 0; i < 3; i++) {
      String id = "selector-" + i;
      LeaderSelector[] self = new LeaderSelector[1];
      self[0] =
          new LeaderSelector(
              cs.get(i),
              path,
              new LeaderSelectorListenerAdapter() {
                @Override
                public void takeLeadership(CuratorFramework client) throws Exception {
                  if (leading.incrementAndGet() > 1) {
                    overlaps.incrementAndGet();
                  }
                  try {
                    turnsOf.computeIfAbsent(id, k -> new AtomicInteger()).incrementAndGet();
                    Participant p = self[0].getLeader();
                    if (!p.getId().equals(id) || !p.isLeader()) {
                      problems.add(id + " leads but getLeader says " + p.getId());
                    }
                    if (!self[0].hasLeadership()) {
                      problems.add(id + " leads but hasLeadership is false");
                    }
                    Thread.sleep(50);
                  } finally {
                    leading.decrementAndGet();
                    turns.incrementAndGet();
                  }
                }
              });
      self[0].setId(id);
      self[0].autoRequeue();
      selectors.add(self[0]);
    }
    for (LeaderSelector s : selectors) {
      s.start();
    }
    boolean participants =
        Checks.await(
            WAIT_MS,
            () -> {
              try {
                return selectors.get(0).getParticipants().size() == 3;
              } catch (Exception e) {
                return false;
              }
            });
    Set<String> ids = new HashSet<>();
    for (Participant p : selectors.get(0).getParticipants()) {
      ids.add(p.getId());
    }
    checks.check(
        "selector: getParticipants names all three ids",
        participants && ids.equals(Set.of("selector-0", "selector-1", "selector-2")),
        "participants " + ids);
    boolean requeued =
        Checks.await(
            WAIT_MS,
            () -> turnsOf.size() == 3 && turnsOf.values().stream().allMatch(n -> n.get() >= 2));
    for (LeaderSelector s : selectors) {
      s.close();
    }
    checks.check("selector: autoRequeue gives each at least two turns", requeued, "turns " + turnsOf);
    checks.check("selector: never two leaders at once", overlaps.get() == 0, overlaps.get() + " overlaps");
    checks.check("selector: getLeader and hasLeadership inside takeLeadership", problems.isEmpty(), problems.toString());
  }

  /** Re-entrant: the holder acquires again; another client waits until both releases. */
  private void mutexReentrant() throws Exception {
    String path = base + "/mutex-reentrant";
    List<CuratorFramework> cs = clients(2);
    InterProcessMutex a = new InterProcessMutex(cs.get(0), path);
    InterProcessMutex b = new InterProcessMutex(cs.get(1), path);
    checks.check("mutex: acquire", a.acquire(WAIT_MS, TimeUnit.MILLISECONDS), "timed out");
    checks.check("mutex: acquire again by the holder (re-entrant)", a.acquire(1, TimeUnit.SECONDS), "timed out");
    checks.check("mutex: held by this thread", a.isAcquiredInThisProcess() && a.isOwnedByCurrentThread(), "not held");
    checks.check("mutex: another client times out while held", !b.acquire(500, TimeUnit.MILLISECONDS), "acquired a held mutex");
    a.release();
    checks.check("mutex: still held after one of two releases", a.isAcquiredInThisProcess() && !b.acquire(300, TimeUnit.MILLISECONDS), "released too early");
    a.release();
    checks.check("mutex: another client acquires after the last release", b.acquire(WAIT_MS, TimeUnit.MILLISECONDS), "timed out");
    b.release();
    checks.check(
        "mutex: no lock nodes left",
        Checks.await(WAIT_MS, () -> children(cs.get(0), path).isEmpty()),
        "children " + children(cs.get(0), path));
  }

  private static List<String> children(CuratorFramework c, String path) {
    try {
      return c.getChildren().forPath(path);
    } catch (Exception e) {
      return List.of("error: " + e);
    }
  }

  /** Three clients, two threads each, 10 turns per thread: no overlap, every turn taken. */
  private void mutexContention() throws Exception {
    String path = base + "/mutex";
    List<CuratorFramework> cs = clients(3);
    AtomicInteger inside = new AtomicInteger();
    AtomicInteger overlaps = new AtomicInteger();
    AtomicInteger done = new AtomicInteger();
    List<String> errors = new CopyOnWriteArrayList<>();
    int[] unguarded = new int[1];
    List<Thread> threads = new ArrayList<>();
    for (CuratorFramework c : cs) {
      for (int t = 0; t < 2; t++) {
        InterProcessMutex m = new InterProcessMutex(c, path);
        threads.add(
            new Thread(
                () -> {
                  try {
                    for (int i = 0; i < 10; i++) {
                      if (!m.acquire(WAIT_MS, TimeUnit.MILLISECONDS)) {
                        errors.add("acquire timed out");
                        return;
                      }
                      try {
                        if (inside.incrementAndGet() > 1) {
                          overlaps.incrementAndGet();
                        }
                        int v = unguarded[0];
                        Thread.sleep(2);
                        unguarded[0] = v + 1;
                        inside.decrementAndGet();
                      } finally {
                        m.release();
                      }
                      done.incrementAndGet();
                    }
                  } catch (Exception e) {
                    errors.add(e.toString());
                  }
                }));
      }
    }
    threads.forEach(Thread::start);
    for (Thread t : threads) {
      t.join(120_000);
    }
    checks.check("mutex: 60 turns under contention", done.get() == 60 && errors.isEmpty(), done.get() + " turns, errors " + errors);
    checks.check("mutex: overlaps under contention", overlaps.get() == 0, overlaps.get() + " overlaps");
    checks.check("mutex: guarded counter", unguarded[0] == done.get(), unguarded[0] + " != " + done.get());
  }

  /** Two leases among three clients: the third waits until one is returned. */
  private void semaphore() throws Exception {
    String path = base + "/semaphore";
    List<CuratorFramework> cs = clients(3);
    List<InterProcessSemaphoreV2> sems = new ArrayList<>();
    for (CuratorFramework c : cs) {
      sems.add(new InterProcessSemaphoreV2(c, path, 2));
    }
    Lease l0 = sems.get(0).acquire(WAIT_MS, TimeUnit.MILLISECONDS);
    Lease l1 = sems.get(1).acquire(WAIT_MS, TimeUnit.MILLISECONDS);
    checks.check("semaphore: two leases of two", l0 != null && l1 != null, "a lease timed out");
    Lease none = sems.get(2).acquire(500, TimeUnit.MILLISECONDS);
    checks.check("semaphore: a third lease times out", none == null, "got a third lease");
    if (none != null) {
      none.close();
    }
    checks.check(
        "semaphore: participant nodes",
        sems.get(2).getParticipantNodes().size() == 2,
        "participants " + sems.get(2).getParticipantNodes());
    CountDownLatch got = new CountDownLatch(1);
    Lease[] third = new Lease[1];
    Thread waiter =
        new Thread(
            () -> {
              try {
                third[0] = sems.get(2).acquire(WAIT_MS, TimeUnit.MILLISECONDS);
                got.countDown();
              } catch (Exception e) {
                e.printStackTrace();
              }
            });
    waiter.start();
    checks.check("semaphore: the waiter still waits", !got.await(300, TimeUnit.MILLISECONDS), "acquired early");
    sems.get(0).returnLease(l0);
    checks.check(
        "semaphore: a returned lease goes to the waiter",
        got.await(WAIT_MS, TimeUnit.MILLISECONDS) && third[0] != null,
        "no lease");
    sems.get(1).returnLease(l1);
    if (third[0] != null) {
      sems.get(2).returnLease(third[0]);
    }

    // Contention: 6 threads, 5 leases each held 50 ms: 2 held at once, never more.
    AtomicInteger held = new AtomicInteger();
    AtomicInteger most = new AtomicInteger();
    AtomicInteger turns = new AtomicInteger();
    List<Thread> threads = new ArrayList<>();
    for (int t = 0; t < 6; t++) {
      InterProcessSemaphoreV2 s = sems.get(t % 3);
      threads.add(
          new Thread(
              () -> {
                try {
                  for (int i = 0; i < 5; i++) {
                    Lease l = s.acquire(WAIT_MS, TimeUnit.MILLISECONDS);
                    if (l == null) {
                      return;
                    }
                    int h = held.incrementAndGet();
                    most.accumulateAndGet(h, Math::max);
                    Thread.sleep(50);
                    held.decrementAndGet();
                    s.returnLease(l);
                    turns.incrementAndGet();
                  }
                } catch (Exception e) {
                  e.printStackTrace();
                }
              }));
    }
    threads.forEach(Thread::start);
    for (Thread t : threads) {
      t.join(120_000);
    }
    checks.check("semaphore: 30 leases under contention", turns.get() == 30, turns.get() + " leases");
    checks.check("semaphore: 2 held at once, never more", most.get() == 2, "at most " + most.get() + " held at once");
  }

  /**
   * ZooKeeper's own addWatch, under CuratorCache: each mode's reply is read without
   * losing the connection (its body is an ErrorResponse), and the watch sees a
   * create below it.
   */
  private void addWatch() throws Exception {
    String path = base + "/addwatch";
    AtomicInteger disconnects = new AtomicInteger();
    CountDownLatch connected = new CountDownLatch(1);
    ZooKeeper zk =
        new ZooKeeper(
            connect,
            Checks.SESSION_TIMEOUT_MS,
            e -> {
              if (e.getState() == Watcher.Event.KeeperState.Disconnected) {
                disconnects.incrementAndGet();
              } else if (e.getState() == Watcher.Event.KeeperState.SyncConnected) {
                connected.countDown();
              }
            });
    try {
      if (!checks.check("addWatch: connected", connected.await(WAIT_MS, TimeUnit.MILLISECONDS), "no connection")) {
        return;
      }
      createRetrying(zk, base);
      createRetrying(zk, path);
      for (AddWatchMode mode : AddWatchMode.values()) {
        List<String> events = new CopyOnWriteArrayList<>();
        zk.addWatch(path, e -> events.add(e.getType() + " " + e.getPath()), mode);
        // The next request is answered after a reconnection if the reply broke the
        // connection; a sync's callback runs after every event before it.
        String child = path + "/" + mode.name().toLowerCase();
        createRetrying(zk, child);
        CountDownLatch synced = new CountDownLatch(1);
        zk.sync(path, (rc, p, ctx) -> synced.countDown(), null);
        synced.await(WAIT_MS, TimeUnit.MILLISECONDS);
        checks.check("addWatch " + mode + ": the reply keeps the connection", disconnects.get() == 0, disconnects.get() + " disconnections");
        // A persistent watch sees its node's children change; a recursive one sees
        // the child's creation itself.
        String want =
            mode == AddWatchMode.PERSISTENT ? "NodeChildrenChanged " + path : "NodeCreated " + child;
        checks.check(
            "addWatch " + mode + ": sees a create below it",
            Checks.await(WAIT_MS, () -> events.contains(want)),
            "events " + events + ", want " + want);
        disconnects.set(0);
      }
    } finally {
      zk.close();
    }
  }

  /** Creates `path`, trying again (for up to WAIT_MS) after a lost connection. */
  private static void createRetrying(ZooKeeper zk, String path) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(WAIT_MS);
    while (true) {
      try {
        zk.create(path, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
        return;
      } catch (KeeperException.NodeExistsException e) {
        return;
      } catch (KeeperException.ConnectionLossException e) {
        if (System.nanoTime() > deadline) {
          throw e;
        }
        Thread.sleep(100);
      }
    }
  }

  /** Events for nodes made before and after start, then initialized, changes, deletes. */
  private void curatorCache() throws Exception {
    String path = base + "/cache";
    List<CuratorFramework> cs = clients(2);
    CuratorFramework writer = cs.get(1);
    writer.create().creatingParentsIfNeeded().forPath(path + "/before", bytes("b0"));
    List<String> events = new CopyOnWriteArrayList<>();
    CountDownLatch initialized = new CountDownLatch(1);
    CuratorCache cache = CuratorCache.build(cs.get(0), path);
    cache
        .listenable()
        .addListener(
            CuratorCacheListener.builder()
                .forCreates(d -> events.add("created " + d.getPath() + " " + str(d)))
                .forChanges((old, now) -> events.add("changed " + now.getPath() + " " + str(now)))
                .forDeletes(d -> events.add("deleted " + d.getPath()))
                .forInitialized(
                    () -> {
                      events.add("initialized");
                      initialized.countDown();
                    })
                .build());
    cache.start();
    checks.check("cache: initialized", initialized.await(WAIT_MS, TimeUnit.MILLISECONDS), "events " + events);
    checks.check(
        "cache: nodes there before start come before initialized",
        events.indexOf("created " + path + "/before b0") >= 0
            && events.indexOf("created " + path + "/before b0") < events.indexOf("initialized"),
        "events " + events);
    writer.create().forPath(path + "/after", bytes("a0"));
    checks.check("cache: create event", Checks.await(WAIT_MS, () -> events.contains("created " + path + "/after a0")), "events " + events);
    writer.setData().forPath(path + "/after", bytes("a1"));
    checks.check("cache: change event", Checks.await(WAIT_MS, () -> events.contains("changed " + path + "/after a1")), "events " + events);
    writer.create().forPath(path + "/after/deep", bytes("d0"));
    checks.check("cache: event below a child", Checks.await(WAIT_MS, () -> events.contains("created " + path + "/after/deep d0")), "events " + events);
    writer.delete().deletingChildrenIfNeeded().forPath(path + "/after");
    checks.check(
        "cache: delete events",
        Checks.await(WAIT_MS, () -> events.contains("deleted " + path + "/after") && events.contains("deleted " + path + "/after/deep")),
        "events " + events);
    checks.check(
        "cache: get",
        cache.get(path + "/before").map(Recipes::str).orElse("").equals("b0") && cache.get(path + "/after").isEmpty(),
        "before=" + cache.get(path + "/before").map(Recipes::str) + " after=" + cache.get(path + "/after").map(Recipes::str));
    cache.close();
  }

  /** Register from two clients, query by name and id, unregister, close. */
  private void serviceDiscovery() throws Exception {
    String path = base + "/services";
    List<CuratorFramework> cs = clients(2);
    List<ServiceDiscovery<String>> ds = new ArrayList<>();
    for (CuratorFramework c : cs) {
      ServiceDiscovery<String> d =
          ServiceDiscoveryBuilder.builder(String.class)
              .client(c)
              .basePath(path)
              .serializer(new JsonInstanceSerializer<>(String.class))
              .build();
      d.start();
      ds.add(d);
    }
    List<ServiceInstance<String>> mine = new ArrayList<>();
    for (int i = 0; i < 2; i++) {
      ServiceInstance<String> s =
          ServiceInstance.<String>builder()
              .name("api")
              .id("api-" + i)
              .address("127.0.0.1")
              .port(8080 + i)
              .payload("payload-" + i)
              .build();
      ds.get(i).registerService(s);
      mine.add(s);
    }
    ServiceDiscovery<String> d0 = ds.get(0);
    checks.check("discovery: queryForNames", d0.queryForNames().contains("api"), "names " + d0.queryForNames());
    Collection<ServiceInstance<String>> found = d0.queryForInstances("api");
    Set<String> got = found.stream().map(s -> s.getId() + "@" + s.getPort() + "/" + s.getPayload()).collect(Collectors.toSet());
    checks.check(
        "discovery: queryForInstances",
        got.equals(Set.of("api-0@8080/payload-0", "api-1@8081/payload-1")),
        "instances " + got);
    ServiceInstance<String> one = d0.queryForInstance("api", "api-1");
    checks.check("discovery: queryForInstance", one != null && one.getAddress().equals("127.0.0.1") && one.getPort() == 8081, "got " + one);
    ds.get(0).unregisterService(mine.get(0));
    checks.check(
        "discovery: unregister",
        d0.queryForInstances("api").stream().map(ServiceInstance::getId).collect(Collectors.toList()).equals(List.of("api-1")),
        "instances " + d0.queryForInstances("api"));
    ds.get(1).close();
    checks.check(
        "discovery: close removes its instances",
        Checks.await(WAIT_MS, () -> {
          try {
            return d0.queryForInstances("api").isEmpty();
          } catch (Exception e) {
            return false;
          }
        }),
        "instances " + d0.queryForInstances("api"));
    d0.close();
  }

  static byte[] bytes(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  static String str(ChildData d) {
    return d.getData() == null ? "" : new String(d.getData(), StandardCharsets.UTF_8);
  }
}
