# Runs inside the sandbox: `python3 probe.py PHASE` reports every descriptor from 3 up (and tries to write
# to it), the keyring, /dev/stdout and /dev/stderr.
import ctypes, os, sys

phase = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
fds = []
for fd in range(3, 4096):
    try:
        os.fstat(fd)
    except OSError:
        continue
    fds.append(fd)
    try:
        os.write(fd, b"LEAK-FROM-SANDBOX\n")
    except OSError:
        pass
print("fds-%s: %s" % (phase, fds))


def err(r):
    return "ok" if r >= 0 else "errno%d" % ctypes.get_errno()


if os.path.exists("keyring.txt"):
    kr, key = (int(x) for x in open("keyring.txt").read().split())
    buf = ctypes.create_string_buffer(64)
    r = libc.syscall(250, ctypes.c_long(11), ctypes.c_long(key), buf, ctypes.c_size_t(64))
    print("key-read-%s: %s %s" % (phase, err(r), buf.raw[:max(r, 0)].decode(errors="replace")))
    r = libc.syscall(249, ctypes.c_char_p(b"user"), ctypes.c_char_p(b"fenced-run-secret"),
                     ctypes.c_char_p(None), ctypes.c_long(0))
    print("key-request-%s: %s" % (phase, err(r)))
    for ring in (-3, -4, -5):
        r = libc.syscall(248, ctypes.c_char_p(b"user"), ctypes.c_char_p(b"fenced-inside-marker"),
                         ctypes.c_char_p(b"x"), ctypes.c_size_t(1), ctypes.c_long(ring))
        print("key-add-%s-%d: %s" % (phase, ring, err(r)))
    with open("/proc/keys") as f:
        text = f.read()
    print("proc-keys-%s: secret=%s runner-ring=%s" % (
        phase, "fenced-run-secret" in text, ("%08x" % kr) in text))
with open("/dev/stdout", "w") as f:
    f.write("via-dev-stdout-%s\n" % phase)
with open("/dev/stderr", "w") as f:
    f.write("via-dev-stderr-%s\n" % phase)
