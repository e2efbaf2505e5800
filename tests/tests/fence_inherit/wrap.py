# Prepares the runner's process the way a careless or hostile parent might, then starts it:
#   --fds PORT SECRET DIR   leave open: fd 50 a root-only file, fd 51 a host directory, fd 52 a TCP connection
#   --keyring FILE          join a session keyring holding a secret key; write "keyring key" serials to FILE
#   --nofile N              hard and soft RLIMIT_NOFILE N
#   --as-nobody             drop to uid/gid 65534 after all of the above
# then `-- RUNNER ARGS...`. With --keyring the runner is a child and its keyring is inspected afterwards.
import ctypes, os, resource, socket, subprocess, sys

args = sys.argv[1:]
cut = args.index("--")
opts, cmd = args[:cut], args[cut + 1:]
libc = ctypes.CDLL(None, use_errno=True)


def opt(name, n=1):
    i = opts.index(name)
    return opts[i + 1:i + 1 + n]


if "--fds" in opts:
    port, secret, hostdir = opt("--fds", 3)
    f = os.open(secret, os.O_RDONLY)
    os.dup2(f, 50)
    os.close(f)
    d = os.open(hostdir, os.O_RDONLY | os.O_DIRECTORY)
    os.dup2(d, 51)
    os.close(d)
    s = socket.create_connection(("127.0.0.1", int(port)))
    os.dup2(s.fileno(), 52)
    s.close()
    for fd in (50, 51, 52):
        os.fstat(fd)
        os.set_inheritable(fd, True)
if "--keyring" in opts:
    (out,) = opt("--keyring")
    kr = libc.syscall(250, ctypes.c_long(1), ctypes.c_char_p(b"fence-inherit-runner"))
    key = libc.syscall(248, ctypes.c_char_p(b"user"), ctypes.c_char_p(b"fenced-run-secret"),
                       ctypes.c_char_p(b"KEY-SECRET-4411"), ctypes.c_size_t(15), ctypes.c_long(-3))
    if kr < 0 or key < 0:
        sys.exit("keyring setup failed: errno %d" % ctypes.get_errno())
    with open(out, "w") as f:
        f.write("%d %d\n" % (kr, key))
if "--nofile" in opts:
    (n,) = opt("--nofile")
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(n), int(n)))
if "--as-nobody" in opts:
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)
if "--keyring" not in opts:
    os.execv(cmd[0], cmd)
r = subprocess.run(cmd, stdout=subprocess.PIPE)
sys.stdout.buffer.write(r.stdout)
# After the run: the runner's key is still there and readable by us, and no key the sandbox tried to add.
buf = ctypes.create_string_buffer(64)
n = libc.syscall(250, ctypes.c_long(11), ctypes.c_long(key), buf, ctypes.c_size_t(64))
print("AFTER: own-key=%s" % (buf.raw[:n].decode() if n > 0 else "unreadable"), file=sys.stderr)
with open("/proc/keys") as f:
    print("AFTER: inside-keys=%d" % sum("fenced-inside" in l for l in f), file=sys.stderr)
sys.exit(r.returncode)
