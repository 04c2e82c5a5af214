// A Curator lock holder driven line by line on stdin, for zookeeper_modes_test's interop cases.
//
// usage: java CuratorPeer CONNECT PATH KIND    (KIND: mutex | write | read)
//
// KIND `mutex` is InterProcessMutex, `write` and `read` the two locks of InterProcessReadWriteLock,
// all on PATH, the node of a dlock lock. Commands: `try` (acquire without waiting: prints `held` or
// `busy`), `wait SECONDS` (`held` or `timeout`), `release` (`released`), `quit`. Prints `ready`
// once connected.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.RetryOneTime;

public final class CuratorPeer {
    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.newClient(args[0], new RetryOneTime(100));
        client.start();
        if (!client.blockUntilConnected(10, TimeUnit.SECONDS)) throw new IllegalStateException("no ZooKeeper session");
        InterProcessLock lock;
        switch (args[2]) {
            case "mutex": lock = new InterProcessMutex(client, args[1]); break;
            case "write": lock = new InterProcessReadWriteLock(client, args[1]).writeLock(); break;
            default: lock = new InterProcessReadWriteLock(client, args[1]).readLock(); break;
        }
        System.out.println("ready");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null;) {
            String[] words = line.trim().split("\\s+");
            if (words[0].equals("try")) {
                System.out.println(lock.acquire(0, TimeUnit.MILLISECONDS) ? "held" : "busy");
            } else if (words[0].equals("wait")) {
                System.out.println(lock.acquire(Long.parseLong(words[1]), TimeUnit.SECONDS) ? "held" : "timeout");
            } else if (words[0].equals("release")) {
                lock.release();
                System.out.println("released");
            } else if (words[0].equals("quit")) {
                break;
            }
            System.out.flush();
        }
        client.close();
    }
}
