// This file implements the catalogue's rows on privilege and the kernel's
// attack surface (PV), and the hardening rows of FS and PR that probe the
// same layers: capabilities, nested user namespaces, the seccomp filter
// (each call also made on the host with invalid arguments, the control that
// it reaches the kernel there), devices, masks, magic links, leaked fds and
// the layers every kind of process carries.

package e2e

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sysProbe is one syscall made inside with invalid arguments: what the
// filter must answer there (EPERM, ENOSYS), and what the host, which
// reaches the kernel's argument checks, may answer (any errno but ENOSYS and
// EPERM; "" skips the host side, for calls that would act there).
type sysProbe struct {
	name string
	nr   uintptr
	args [6]uintptr
	want string
}

// bad is an address no process maps.
const bad = 1

// pvProbes are the calls of PV-04…PV-09 and FS-11, by row.
var pvProbes = map[string][]sysProbe{
	"PV-04": {
		{"keyctl", unix.SYS_KEYCTL, [6]uintptr{^uintptr(0)}, "EPERM"},
		{"add_key", unix.SYS_ADD_KEY, [6]uintptr{bad, bad, bad, 0, 0}, "EPERM"},
		{"request_key", unix.SYS_REQUEST_KEY, [6]uintptr{bad, bad, bad, 0}, "EPERM"},
	},
	"PV-05": {
		{"bpf", unix.SYS_BPF, [6]uintptr{^uintptr(0), bad, 0}, "EPERM"},
	},
	"PV-06": {
		{"perf_event_open", unix.SYS_PERF_EVENT_OPEN, [6]uintptr{bad, 0, ^uintptr(0), ^uintptr(0), 0}, "EPERM"},
	},
	"PV-07": {
		{"io_uring_setup", unix.SYS_IO_URING_SETUP, [6]uintptr{0, bad}, "ENOSYS"},
		{"io_uring_enter", unix.SYS_IO_URING_ENTER, [6]uintptr{^uintptr(0), 0, 0, 0, 0, 0}, "ENOSYS"},
		{"io_uring_register", unix.SYS_IO_URING_REGISTER, [6]uintptr{^uintptr(0), 0, 0, 0}, "ENOSYS"},
	},
	"PV-08": {
		{"init_module", unix.SYS_INIT_MODULE, [6]uintptr{bad, 0, bad}, "EPERM"},
		{"finit_module", unix.SYS_FINIT_MODULE, [6]uintptr{^uintptr(0), bad, 0}, "EPERM"},
		{"delete_module", unix.SYS_DELETE_MODULE, [6]uintptr{bad, 0}, "EPERM"},
		{"kexec_load", unix.SYS_KEXEC_LOAD, [6]uintptr{0, 0, 0, 0xffff0000}, "EPERM"},
		{"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD, [6]uintptr{^uintptr(0), ^uintptr(0), 0, 0, 0xffffffff}, "EPERM"},
	},
	"PV-09": {
		{"userfaultfd", unix.SYS_USERFAULTFD, [6]uintptr{0xffffffff}, "EPERM"},
		{"personality", unix.SYS_PERSONALITY, [6]uintptr{8}, "EPERM"}, // PER_LINUX32; not made on the host
		{"acct", unix.SYS_ACCT, [6]uintptr{bad}, "EPERM"},
		{"swapon", unix.SYS_SWAPON, [6]uintptr{bad, 0}, "EPERM"},
		{"swapoff", unix.SYS_SWAPOFF, [6]uintptr{bad}, "EPERM"},
		{"reboot", unix.SYS_REBOOT, [6]uintptr{0, 0, 0, 0}, "EPERM"},
		{"settimeofday", unix.SYS_SETTIMEOFDAY, [6]uintptr{bad, 0}, "EPERM"},
		{"clock_settime", unix.SYS_CLOCK_SETTIME, [6]uintptr{^uintptr(0), bad}, "EPERM"},
		{"clock_adjtime", unix.SYS_CLOCK_ADJTIME, [6]uintptr{^uintptr(0), bad}, "EPERM"},
		{"syslog", unix.SYS_SYSLOG, [6]uintptr{^uintptr(0), 0, 0}, "EPERM"},
		{"setns", unix.SYS_SETNS, [6]uintptr{^uintptr(0), 0}, "EPERM"},
		{"fanotify_init", unix.SYS_FANOTIFY_INIT, [6]uintptr{0xffffffff, 0}, "EPERM"},
		{"quotactl", unix.SYS_QUOTACTL, [6]uintptr{0, bad, 0, 0}, "EPERM"},
		{"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT, [6]uintptr{^uintptr(0), bad, bad, bad, 0}, "EPERM"},
		{"mknod block", unix.SYS_MKNODAT, [6]uintptr{^uintptr(0) - 99, 0, unix.S_IFBLK | 0o600, 0}, "EPERM|EACCES"}, // path filled in; no MKNOD, and Landlock refuses devices
	},
	"FS-11": {
		{"mount", unix.SYS_MOUNT, [6]uintptr{bad, bad, bad, 0, 0}, "EPERM"},
		{"umount2", unix.SYS_UMOUNT2, [6]uintptr{bad, 0}, "EPERM"},
		{"pivot_root", unix.SYS_PIVOT_ROOT, [6]uintptr{bad, bad}, "EPERM"},
		{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT, [6]uintptr{^uintptr(0), bad, 0}, "EPERM"},
		{"move_mount", unix.SYS_MOVE_MOUNT, [6]uintptr{^uintptr(0), bad, ^uintptr(0), bad, 0}, "EPERM"},
		{"fsopen", unix.SYS_FSOPEN, [6]uintptr{bad, 0}, "EPERM"},
		{"unshare newns", unix.SYS_UNSHARE, [6]uintptr{unix.CLONE_NEWNS}, "EPERM"},
	},
}

// sysProbeScript makes each call of its JSON argument inside and prints the
// errno names, as JSON. mknodat's path is a file in /tmp.
const sysProbeScript = `import ctypes, errno, json, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
path = ctypes.create_string_buffer(b"/tmp/pv-blockdev")
out = {}
for name, nr, args in json.loads(sys.argv[1]):
    if name == "mknod block":
        args[1] = ctypes.addressof(path)
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(a) for a in args])
    e = ctypes.get_errno()
    out[name] = "ok" if r >= 0 else errno.errorcode.get(e, str(e))
print(json.dumps(out))
`

func sysProbeSetup(r *run) error {
	r.create(nil)
	st, b := r.api("PUT", "/v1/sandboxes/"+r.a()+"/files/write", map[string]any{"path": "/workspace/sysprobe.py", "content": sysProbeScript})
	if st != 200 {
		return fmt.Errorf("writing the probe: %d %s", st, b)
	}
	return nil
}

// sysProbeControl: each call reaches the kernel on the host (its argument
// checks answer, not ENOSYS or EPERM), and allowed calls work inside.
func sysProbeControl(id string) func(r *run) error {
	return func(r *run) error {
		var vacuous []string
		for _, p := range pvProbes[id] {
			switch p.name {
			case "personality", "reboot", "unshare newns":
				// personality and unshare would act on the test process;
				// reboot's control is its magic check, below.
				continue
			case "mknod block":
				dir := r.t.TempDir()
				if err := unix.Mknod(filepath.Join(dir, "blk"), unix.S_IFBLK|0o600, 0); err != nil {
					return fmt.Errorf("control: mknod of a block device on the host: %v", err)
				}
				continue
			}
			_, _, e := syscall.Syscall6(p.nr, p.args[0], p.args[1], p.args[2], p.args[3], p.args[4], p.args[5])
			switch {
			case e == unix.ENOSYS:
				// The kernel lacks the call (no modules, no kexec): inside,
				// the filter's own errno shows it answered, not the kernel.
				vacuous = append(vacuous, p.name)
			case e == unix.EPERM || e == 0:
				return fmt.Errorf("control: %s on the host = %v, want its argument checks' error", p.name, e)
			}
		}
		if len(vacuous) > 0 {
			r.note("vacuous on this kernel, which lacks them (ENOSYS on the host; inside the filter answers): %s", strings.Join(vacuous, ", "))
		}
		if id == "PV-09" {
			if _, _, e := syscall.Syscall6(unix.SYS_REBOOT, 0, 0, 0, 0, 0, 0); e != unix.EINVAL {
				return fmt.Errorf("control: reboot with a bad magic on the host = %v, want EINVAL", e)
			}
		}
		res := r.sh(r.a(), "python3 -c 'import os; print(os.getpid() > 0)'")
		if strings.TrimSpace(res.Stdout) != "True" {
			return fmt.Errorf("control: python inside: %+v", res)
		}
		return nil
	}
}

func sysProbeAttack(id string) func(r *run) error {
	return func(r *run) error {
		var calls [][]any
		for _, p := range pvProbes[id] {
			calls = append(calls, []any{p.name, p.nr, p.args[:]})
		}
		js, _ := json.Marshal(calls)
		res := r.exec(r.a(), map[string]any{"argv": []string{"python3", "/workspace/sysprobe.py", string(js)}, "timeout": 60})
		var got map[string]string
		if err := json.Unmarshal([]byte(res.Stdout), &got); err != nil {
			return fmt.Errorf("the probe did not run: %+v", res)
		}
		for _, p := range pvProbes[id] {
			if !slices.Contains(strings.Split(p.want, "|"), got[p.name]) {
				r.breach("%s: %s inside = %s, want %s", id, p.name, got[p.name], p.want)
			}
		}
		r.note("%d calls, each %s inside and reaching the kernel's argument checks on the host", len(pvProbes[id]), "refused")
		return nil
	}
}

// PV-02: the capability sets equal the profile, and what they leave out fails.
func pv02Setup(r *run) error { r.create(nil); return nil }

func pv02Control(r *run) error {
	// Allowed targets: what the kept capabilities allow works.
	res := r.sh(r.a(), "chown 1000:1000 /workspace && setpriv --reuid=1000 --regid=1000 --clear-groups id -u && python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 80)); print(\"bind80\")' && python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM); print(\"dgram\")'")
	if !strings.Contains(res.Stdout, "1000\nbind80\ndgram") {
		return fmt.Errorf("control: chown, setuid, a port below 1024, a datagram socket: %+v", res)
	}
	return nil
}

func pv02Attack(r *run) error {
	res := r.sh(r.a(), `grep -E '^Cap' /proc/self/status | tr -d '\t'
hostname other && echo SYS_ADMIN || true
python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1); print("NET_RAW")' 2>/dev/null
ip link add sbx0 type dummy 2>/dev/null && echo NET_ADMIN
python3 -c '
import ctypes; libc = ctypes.CDLL(None, use_errno=True)
print("SYS_PTRACE") if libc.ptrace(16, 1, 0, 0) == 0 else None' 2>/dev/null
chroot / true 2>/dev/null && echo SYS_CHROOT
mknod /tmp/c c 1 3 2>/dev/null && echo MKNOD
true`)
	caps := map[string]string{}
	for _, l := range strings.Split(res.Stdout, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.HasPrefix(k, "Cap") {
			caps[k] = v
		}
	}
	want := map[string]string{"CapInh": "00000000000005fb", "CapPrm": "00000000000005fb", "CapEff": "00000000000005fb",
		"CapBnd": "00000000000005fb", "CapAmb": "0000000000000000"}
	for k, v := range want {
		if caps[k] != v {
			r.breach("PV-02: %s = %q, want %s (the default profile)", k, caps[k], v)
		}
	}
	for _, op := range []string{"SYS_ADMIN", "NET_RAW", "NET_ADMIN", "SYS_PTRACE", "SYS_CHROOT", "MKNOD"} {
		if strings.Contains(res.Stdout, op) {
			r.breach("PV-02: an operation needing %s succeeded", op)
		}
	}
	return nil
}

// PV-03: nested user namespaces are refused, by seccomp and by the limit.
func pv03Setup(r *run) error { r.create(nil); return nil }

func pv03Control(r *run) error {
	// Unconfined: the host lets an unprivileged process make one.
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "unshare", "-Ur", "id", "-u").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "0" {
		return fmt.Errorf("control: unshare -Ur on the host as nobody = %q, %v", out, err)
	}
	return nil
}

func pv03Attack(r *run) error {
	res := r.sh(r.a(), "unshare -Urmn true && echo made; setpriv --reuid=1000 --regid=1000 --clear-groups unshare -Ur true && echo made-as-user; cat /proc/sys/user/max_user_namespaces")
	if strings.Contains(res.Stdout, "made") {
		r.breach("PV-03: a nested user namespace was made: %q", res.Stdout)
	}
	if !strings.HasSuffix(strings.TrimSpace(res.Stdout), "0") {
		r.breach("PV-03: user.max_user_namespaces inside = %q, want 0", res.Stdout)
	}
	return nil
}

// PV-12: devices.
func pv12Setup(r *run) error { r.create(nil); return nil }

func pv12Control(r *run) error {
	res := r.sh(r.a(), "mkfifo /tmp/f && test -p /tmp/f && echo x > /dev/null && head -c 4 /dev/urandom | wc -c")
	if strings.TrimSpace(res.Stdout) != "4" {
		return fmt.Errorf("control: a FIFO and the allowed devices: %+v", res)
	}
	return nil
}

func pv12Attack(r *run) error {
	res := r.sh(r.a(), "ls /dev | tr '\\n' ' '; echo; for d in kvm mem kmem port sda vda loop0 net/tun fuse dri; do test -e /dev/$d && echo present:$d; done; mknod /tmp/kvm c 10 232 && echo made; mknod /dev/shm/x b 8 0 && echo made; true")
	allowed := map[string]bool{"null": true, "zero": true, "full": true, "random": true, "urandom": true, "tty": true,
		"ptmx": true, "pts": true, "shm": true, "fd": true, "stdin": true, "stdout": true, "stderr": true}
	first, _, _ := strings.Cut(res.Stdout, "\n")
	for _, d := range strings.Fields(first) {
		if !allowed[d] {
			r.breach("PV-12: /dev/%s is in the sandbox", d)
		}
	}
	if strings.Contains(res.Stdout, "present:") || strings.Contains(res.Stdout, "made") {
		r.breach("PV-12: %q", res.Stdout)
	}
	return nil
}

// FS-13: writes to the kernel's tunables from inside.
var fs13Targets = []string{"/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sysrq-trigger",
	"/proc/sys/vm/drop_caches", "/sys/kernel/uevent_helper", "/sys/fs/cgroup/release_agent"}

func fs13Control(r *run) error {
	// Unconfined: the host may open each for writing (closed unwritten).
	for _, p := range fs13Targets[:4] {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if os.IsNotExist(err) {
			continue // this kernel has no such tunable (modprobe without modules)
		}
		if err != nil {
			return fmt.Errorf("control: opening %s for writing on the host: %v", p, err)
		}
		f.Close()
	}
	res := r.sh(r.a(), "cat /proc/sys/kernel/core_pattern >/dev/null && echo readable")
	if !strings.Contains(res.Stdout, "readable") {
		return fmt.Errorf("control: /proc/sys reads inside: %+v", res)
	}
	return nil
}

func fs13Attack(r *run) error {
	var script strings.Builder
	for _, p := range fs13Targets {
		fmt.Fprintf(&script, "(echo '|/tmp/x' > %s) 2>/dev/null && echo wrote:%s\n", p, p)
	}
	script.WriteString("for f in $(find /proc/sys -type f 2>/dev/null | head -2000); do (: > $f) 2>/dev/null && echo opened:$f; done; true")
	res := r.sh(r.a(), script.String())
	if strings.Contains(res.Stdout, "wrote:") || strings.Contains(res.Stdout, "opened:") {
		r.breach("FS-13: %.500s", res.Stdout)
	}
	return nil
}

// FS-11 adds to its syscalls: chroot, the masks' state after the attempts.
func fs11Attack(r *run) error {
	if err := sysProbeAttack("FS-11")(r); err != nil {
		return err
	}
	res := r.sh(r.a(), `chroot / true 2>/dev/null && echo chroot
mount -t tmpfs x /mnt 2>/dev/null && echo mounted
mount -o remount,rw /proc/sys 2>/dev/null && echo remounted
umount /proc/kcore 2>/dev/null && echo unmasked
echo kcore=$(cat /proc/kcore 2>/dev/null | wc -c) keys=$(wc -c < /proc/keys)
(echo x > /proc/sys/kernel/hostname) 2>/dev/null && echo sysrw`)
	for _, bad := range []string{"chroot", "mounted", "remounted", "unmasked", "sysrw"} {
		if strings.Contains(res.Stdout, bad+"\n") {
			r.breach("FS-11: %s succeeded", bad)
		}
	}
	if !strings.Contains(res.Stdout, "kcore=0 keys=0") {
		r.breach("FS-11: masks: %q", res.Stdout)
	}
	return nil
}

// FS-09: only declared fds reach a process; a cwd through /proc/self/fd is refused.
func fs09Setup(r *run) error { r.create(nil); return nil }

func fs09Control(r *run) error {
	st, b := r.api("POST", "/v1/sandboxes/"+r.a()+"/exec", map[string]any{"command": "pwd", "cwd": "/tmp"})
	if st != 200 || !strings.Contains(string(b), `/tmp\n`) {
		return fmt.Errorf("control: exec with cwd /tmp = %d %s", st, b)
	}
	return nil
}

func fs09Attack(r *run) error {
	id := r.a()
	res := r.sh(id, "ls /proc/self/fd | tr '\\n' ' '; echo; for n in $(seq 0 1024); do (cd /proc/self/fd/$n 2>/dev/null && echo dir:$n:$(pwd -P)); done; true")
	fds := strings.Fields(strings.SplitN(res.Stdout, "\n", 2)[0])
	for _, fd := range fds {
		if n, _ := strconv.Atoi(fd); n > 3 {
			r.breach("FS-09: the exec holds fd %s (only 0-2 and ls's own)", fd)
		}
	}
	if strings.Contains(res.Stdout, "dir:") {
		r.breach("FS-09: an fd leads to a directory: %q", res.Stdout)
	}
	for _, n := range []int{3, 4, 5, 6, 7, 8, 9, 10} {
		st, b := r.api("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "pwd -P; ls", "cwd": "/proc/self/fd/" + strconv.Itoa(n)})
		if st == 200 && strings.Contains(string(b), `"exit_code":0`) {
			r.breach("FS-09: exec with cwd /proc/self/fd/%d ran: %.200s", n, b)
		}
	}
	// The agent (PID 1) is not dumpable: its fds are out of reach.
	res = r.sh(id, "ls -l /proc/1/fd/ 2>&1 | head -3; ls /proc/1/root/ 2>&1 | head -1")
	if strings.Contains(res.Stdout, "->") {
		r.breach("FS-09: the agent's fds are listed: %q", res.Stdout)
	}
	return nil
}

// FS-10: the binaries of every visible process are not writable.
func fs10Control(r *run) error {
	res := r.sh(r.a(), "cp /bin/true /workspace/t && echo x >> /workspace/t && echo own-ok")
	if !strings.Contains(res.Stdout, "own-ok") {
		return fmt.Errorf("control: writing a binary of its own: %+v", res)
	}
	return nil
}

func fs10Attack(r *run) error {
	id := r.a()
	r.exec(id, map[string]any{"command": "sleep 60", "background": true})
	res := r.sh(id, `for p in /proc/[0-9]*; do (echo x >> $p/exe) 2>/dev/null && echo wrote:$p; done
printf '#!/proc/self/exe\n' > /workspace/s.sh && chmod +x /workspace/s.sh && /workspace/s.sh 2>/dev/null; true`)
	if strings.Contains(res.Stdout, "wrote:") {
		r.breach("FS-10: %q", res.Stdout)
	}
	// The host-state canary hashes the sbx binary and the sealed copy.
	return nil
}

// PR-02: ptrace, process_vm_readv and /proc/<pid>/mem against the agent.
func pr02Control(r *run) error {
	// Allowed: a process traces its own child.
	res := r.sh(r.a(), "strace -f -e trace=getpid sh -c 'true' 2>&1 | tail -1")
	if !strings.Contains(res.Stdout, "exited with 0") {
		return fmt.Errorf("control: strace of its own child: %+v", res)
	}
	return nil
}

func pr02Attack(r *run) error {
	res := r.sh(r.a(), `python3 - <<'EOF'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(16, 1, 0, 0) == 0: print("attached")   # PTRACE_ATTACH to the agent
try:
    open("/proc/1/mem", "rb").read(1); print("mem")
except OSError: pass
class iov(ctypes.Structure): _fields_ = [("b", ctypes.c_void_p), ("n", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(8)
l, rr = iov(ctypes.addressof(buf), 8), iov(0x400000, 8)
if libc.process_vm_readv(1, ctypes.byref(l), 1, ctypes.byref(rr), 1, 0) > 0: print("vm_readv")
for fd in os.listdir("/proc/1/fd"):
    try:
        os.readlink("/proc/1/fd/" + fd); print("fd-link")
    except OSError: pass
    try:
        open("/proc/1/fd/" + fd, "rb").close(); print("fd-open")
    except OSError: pass
EOF`)
	for _, bad := range []string{"attached", "mem", "vm_readv", "fd-link", "fd-open"} {
		if strings.Contains(res.Stdout, bad) {
			r.breach("PR-02: %s of the agent succeeded", bad)
		}
	}
	return nil
}

// PR-04: TIOCSTI and TIOCLINUX into a terminal.
func pr04Control(r *run) error {
	res := r.sh(r.a(), `python3 -c '
import pty, fcntl, termios, struct
m, s = pty.openpty()
fcntl.ioctl(s, termios.TIOCGWINSZ, struct.pack("HHHH", 0, 0, 0, 0)); print("winsz")'`)
	if !strings.Contains(res.Stdout, "winsz") {
		return fmt.Errorf("control: an ioctl on its own terminal: %+v", res)
	}
	return nil
}

func pr04Attack(r *run) error {
	res := r.sh(r.a(), `python3 -c '
import pty, fcntl, termios, os
m, s = pty.openpty()
for name, req in (("TIOCSTI", termios.TIOCSTI), ("TIOCLINUX", 0x541C), ("TIOCSTI-high", termios.TIOCSTI | (1 << 32))):
    try:
        fcntl.ioctl(s, req, b"x"); print("injected", name)
    except OSError as e:
        print(name, os.strerror(e.errno))'`)
	if strings.Contains(res.Stdout, "injected") {
		r.breach("PR-04: %q", res.Stdout)
	}
	return nil
}

// PR-05: SysV IPC and abstract sockets of the host, from inside.
func pr05Setup(r *run) error {
	r.create(nil)
	name := "@sbx-pr05-" + randHex(6)
	ln, err := netListenAbstract(name)
	if err != nil {
		return err
	}
	r.set("abstract", name)
	r.t.Cleanup(func() { ln.Close() })
	key := 0x5b0000 + int(randUint16())
	shm, _, e := syscall.Syscall(syscall.SYS_SHMGET, uintptr(key), 4096, unix.IPC_CREAT|0o666)
	if e != 0 {
		return fmt.Errorf("shmget on the host: %v", e)
	}
	r.t.Cleanup(func() { syscall.Syscall(syscall.SYS_SHMCTL, shm, unix.IPC_RMID, 0) })
	r.set("shmkey", strconv.Itoa(key))
	return nil
}

func pr05Control(r *run) error {
	// Unconfined: the host reaches both.
	if _, _, e := syscall.Syscall(syscall.SYS_SHMGET, uintptr(atoi(r.get("shmkey"))), 0, 0); e != 0 {
		return fmt.Errorf("control: the host's own shmget: %v", e)
	}
	c, err := netDialAbstract(r.get("abstract"))
	if err != nil {
		return fmt.Errorf("control: the host's own abstract socket: %v", err)
	}
	c.Close()
	return nil
}

func pr05Attack(r *run) error {
	res := r.sh(r.a(), fmt.Sprintf(`python3 -c '
import ctypes, socket
libc = ctypes.CDLL(None, use_errno=True)
if libc.shmget(%s, 0, 0) >= 0: print("shm")
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\0%s"); print("abstract")
except OSError: pass'; ipcs -m | grep -c 0x`, r.get("shmkey"), strings.TrimPrefix(r.get("abstract"), "@")))
	if strings.Contains(res.Stdout, "shm") || strings.Contains(res.Stdout, "abstract") {
		r.breach("PR-05: %q", res.Stdout)
	}
	return nil
}

// PV-10: every kind of process carries the layers the sandbox reports.
func pv10Control(r *run) error {
	var sb struct {
		Isolation struct {
			Level  string            `json:"level"`
			Layers map[string]string `json:"layers"`
		} `json:"isolation"`
	}
	_, b := r.api("GET", "/v1/sandboxes/"+r.a(), nil)
	if err := json.Unmarshal(b, &sb); err != nil || sb.Isolation.Level != "native" {
		return fmt.Errorf("control: the sandbox reports %.300s, want level native", b)
	}
	return nil
}

func pv10Attack(r *run) error {
	id := r.a()
	bg := r.exec(id, map[string]any{"command": "sleep 120", "background": true})
	res := r.sh(id, fmt.Sprintf(`for p in 1 $$ %d; do echo "$p $(grep -E '^(NoNewPrivs|Seccomp):' /proc/$p/status | tr -d '\t' | tr '\n' ' ')"; done
readlink /proc/1/ns/user /proc/$$/ns/user /proc/$$/ns/mnt
touch /newfile 2>/dev/null && echo landlock-open`, bg.PID))
	lines := strings.Split(res.Stdout, "\n")
	if len(lines) < 3 {
		return fmt.Errorf("the probe did not run: %+v", res)
	}
	if !strings.Contains(lines[0], "NoNewPrivs:1") {
		r.breach("PV-10: the agent lacks no_new_privs: %q", lines[0])
	}
	for _, l := range lines[1:3] {
		if !strings.Contains(l, "NoNewPrivs:1") || !strings.Contains(l, "Seccomp:2") {
			r.breach("PV-10: a workload process lacks no_new_privs or the filter: %q", l)
		}
	}
	if strings.Contains(res.Stdout, "landlock-open") {
		r.breach("PV-10: a write outside the Landlock rules succeeded")
	}
	host, _ := os.Readlink("/proc/self/ns/user")
	if strings.Contains(res.Stdout, host) {
		r.breach("PV-10: a sandbox process is in the host's user namespace")
	}
	return nil
}

// PV-11: fail closed. A daemon built with the fault hook reports Landlock
// missing; a create fails naming it, until the operator accepts the gap.
func pv11Control(r *run) error {
	bin := faultBinary(r.t)
	d := startDaemonBin(r.t, bin, "", "SBX_POOL_SIZE=0")
	r.mu.Lock()
	r.private = append(r.private, d)
	r.mu.Unlock()
	st, b := d.api("POST", "/v1/sandboxes", map[string]any{})
	if st != 201 {
		return fmt.Errorf("control: a create on the fault build without the fault = %d %s", st, b)
	}
	var sb struct{ ID string }
	json.Unmarshal(b, &sb)
	d.api("DELETE", "/v1/sandboxes/"+sb.ID, nil)
	return nil
}

func pv11Attack(r *run) error {
	bin := faultBinary(r.t)
	for _, layer := range []string{"landlock", "seccomp", "userns"} {
		d := startDaemonBin(r.t, bin, "", "SBX_POOL_SIZE=0", "SBX_FAULT_MISSING="+layer)
		r.mu.Lock()
		r.private = append(r.private, d)
		r.mu.Unlock()
		st, b := d.api("POST", "/v1/sandboxes", map[string]any{})
		_, hb := d.api("GET", "/v1/health", nil)
		if !strings.Contains(string(hb), `"`+layer+`":"missing"`) {
			r.breach("PV-11: health does not show %s missing: %.300s", layer, hb)
		}
		if layer == "userns" {
			// The native jail is built on it: without it the backend is
			// unavailable, accepted gap or not.
			if st != 503 || !strings.Contains(string(b), "user namespaces") {
				r.breach("PV-11: a create with userns missing = %d %.300s, want 503 naming user namespaces", st, b)
			}
			continue
		}
		if st != 503 || !strings.Contains(string(b), "isolation_unavailable") || !strings.Contains(string(b), "layer "+layer) {
			r.breach("PV-11: a create with %s missing = %d %.300s, want 503 isolation_unavailable naming it", layer, st, b)
		}
		// The operator accepts the gap by name: the create succeeds and says so.
		d2 := startDaemonBin(r.t, bin, "", "SBX_POOL_SIZE=0", "SBX_FAULT_MISSING="+layer, "SBX_ALLOW_MISSING="+layer)
		r.mu.Lock()
		r.private = append(r.private, d2)
		r.mu.Unlock()
		st, b = d2.api("POST", "/v1/sandboxes", map[string]any{})
		if st != 201 || !strings.Contains(string(b), `"level":"native-minus-`+layer+`"`) || !strings.Contains(string(b), `"accepted_gaps":["`+layer+`"]`) {
			r.breach("PV-11: with %s accepted, create = %d %.400s, want 201 at level native-minus-%s", layer, st, b, layer)
		}
		var sb struct{ ID string }
		if json.Unmarshal(b, &sb) == nil && sb.ID != "" {
			d2.api("DELETE", "/v1/sandboxes/"+sb.ID, nil)
		}
	}
	return nil
}

func oneSandbox(r *run) error { r.create(nil); return nil }

// netListenAbstract listens on the abstract unix socket name ("@…") of the
// test's (the host's) network namespace.
func netListenAbstract(name string) (net.Listener, error) {
	return net.Listen("unix", "\x00"+strings.TrimPrefix(name, "@"))
}

func netDialAbstract(name string) (net.Conn, error) {
	return net.Dial("unix", "\x00"+strings.TrimPrefix(name, "@"))
}

func randUint16() uint16 {
	n, _ := strconv.ParseUint(randHex(2), 16, 16)
	return uint16(n)
}

// foreignABI runs machine code from W+X memory: a syscall through the i386
// ABI (int 0x80), or an x32 number, or (control) a native getpid.
const foreignABI = `import ctypes, mmap, sys
code = {
    "native": b"\xb8\x27\x00\x00\x00\x0f\x05\xc3",          # mov eax,39; syscall; ret
    "i386":   b"\xb8\x14\x00\x00\x00\xcd\x80\xc3",          # mov eax,20; int 0x80; ret
    "x32":    b"\xb8\x27\x00\x00\x40\x0f\x05\xc3",          # mov eax,0x40000027; syscall; ret
}[sys.argv[1]]
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(code)
f = ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
print("returned", f())
`

// pv09Attack adds the foreign ABIs to the sweep: each kills the process
// (SIGSYS), where the same code with the native ABI returns (control).
func pv09Attack(r *run) error {
	if err := sysProbeAttack("PV-09")(r); err != nil {
		return err
	}
	id := r.a()
	r.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": "/workspace/abi.py", "content": foreignABI})
	native := r.exec(id, map[string]any{"argv": []string{"python3", "/workspace/abi.py", "native"}, "timeout": 30})
	if !strings.Contains(native.Stdout, "returned") {
		return fmt.Errorf("control: native syscall from W+X memory: %+v", native)
	}
	for _, abi := range []string{"i386", "x32"} {
		res := r.exec(id, map[string]any{"argv": []string{"python3", "/workspace/abi.py", abi}, "timeout": 30})
		if strings.Contains(res.Stdout, "returned") || res.Reason != "signaled" || res.ExitCode != 128+int(syscall.SIGSYS) {
			r.breach("PV-09: a %s call = %+v, want the process killed by SIGSYS", abi, res)
		}
	}
	return nil
}

// RS-01: a fork bomb stops at the pids limit, is reported, and hurts no one
// else.
func rs01Setup(r *run) error { r.create(map[string]any{"pids": 64, "memory_mb": 256}); return nil }

func rs01Control(r *run) error {
	res := r.sh(r.a(), "for i in $(seq 20); do sleep 1 & done; wait; echo forked")
	if !strings.Contains(res.Stdout, "forked") || res.Reason != "exited" {
		return fmt.Errorf("control: 20 children under a limit of 64: %+v", res)
	}
	return nil
}

func rs01Attack(r *run) error {
	id := r.a()
	done := make(chan execResult, 1)
	go func() {
		done <- r.exec(id, map[string]any{"command": "for i in $(seq 1000); do sleep 5 & done; wait", "timeout": 60})
	}()
	// Meanwhile a sibling's exec and the daemon answer.
	time.Sleep(500 * time.Millisecond)
	for range 3 {
		st, b, d := r.timedCall("POST", "/v1/sandboxes/"+r.env.sibling+"/exec", map[string]any{"command": "echo ok", "timeout": 30})
		if st != 200 || d > 2*time.Second {
			r.breach("RS-01: the sibling's exec during the bomb = %d in %s %.200s (bound 2 s)", st, d, b)
		}
		if st, _, d := r.timedCall("GET", "/v1/health", nil); st != 200 || d > 2*time.Second {
			r.breach("RS-01: health during the bomb = %d in %s", st, d)
		}
	}
	res := <-done
	if res.Reason != "pids_exhausted" {
		r.breach("RS-01: the bomb's exec ended %q (exit %d), want pids_exhausted", res.Reason, res.ExitCode)
	}
	// While the bomb's children live, a new exec is refused with the reason;
	// once they are gone, execs work again.
	if res := r.sh(id, "ls -d /proc/[0-9]* | wc -l"); res.Reason == "pids_exhausted" {
		r.note("an exec while the limit is full: exit %d, reason pids_exhausted", res.ExitCode)
	} else if atoi(strings.TrimSpace(res.Stdout)) > 64+32 {
		r.breach("RS-01: %s processes under a limit of 64 (and the agent's 32)", res.Stdout)
	}
	if !waitUntil(20*time.Second, func() bool { return r.sh(id, "true").Reason == "exited" }) {
		r.breach("RS-01: execs still fail 20 s after the bomb's children ended")
	}
	st, _, d := r.timedCall("DELETE", "/v1/sandboxes/"+id, nil)
	if st != 204 || d > 5*time.Second {
		r.breach("RS-01: DELETE of the bombed sandbox = %d in %s (bound 5 s)", st, d)
	}
	r.note("the sandbox was deleted in %s", d.Round(time.Millisecond))
	return nil
}

// RS-02: memory bombs, one thread and many, are OOM-killed inside the
// sandbox's group and reported; the agent survives.
func rs02Setup(r *run) error { r.create(map[string]any{"memory_mb": 96}); return nil }

func rs02Control(r *run) error {
	res := r.sh(r.a(), "python3 -c 'x = bytearray(16 << 20); print(len(x))'")
	if strings.TrimSpace(res.Stdout) != "16777216" {
		return fmt.Errorf("control: 16 MiB under a limit of 96 MiB: %+v", res)
	}
	return nil
}

func rs02Attack(r *run) error {
	id := r.a()
	for name, cmd := range map[string]string{
		"one thread": "python3 -c 'x = bytearray(1 << 30)'",
		"threads":    "python3 -c 'import threading; b = []\ndef f():\n    while True: b.append(bytearray(8 << 20))\nts = [threading.Thread(target=f) for _ in range(8)]\n[t.start() for t in ts]; [t.join() for t in ts]'",
	} {
		res := r.exec(id, map[string]any{"command": cmd, "timeout": 60})
		if res.Reason != "oom" {
			r.breach("RS-02 %s: reason %q exit %d, want oom", name, res.Reason, res.ExitCode)
		}
	}
	if res := r.sh(id, "echo alive"); res.Stdout != "alive\n" {
		r.breach("RS-02: the agent did not survive: %+v", res)
	}
	if res := r.sh(r.env.sibling, "echo ok"); res.Stdout != "ok\n" {
		r.breach("RS-02: the sibling: %+v", res)
	}
	return nil
}

// RS-06: /tmp and /dev/shm are bounded by their size and the memory limit.
func rs06Setup(r *run) error { r.create(map[string]any{"memory_mb": 128}); return nil }

func rs06Control(r *run) error {
	res := r.sh(r.a(), "head -c 8M /dev/zero > /tmp/a && head -c 8M /dev/zero > /dev/shm/a && echo wrote; rm -f /tmp/a /dev/shm/a")
	if !strings.Contains(res.Stdout, "wrote") {
		return fmt.Errorf("control: 8 MiB in /tmp and /dev/shm: %+v", res)
	}
	return nil
}

func rs06Attack(r *run) error {
	id := r.a()
	for _, dir := range []string{"/tmp", "/dev/shm"} {
		res := r.exec(id, map[string]any{"command": "dd if=/dev/zero of=" + dir + "/fill bs=1M count=4096 2>&1 | tail -1; du -sm " + dir + " | cut -f1", "timeout": 60})
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		mb := atoi(lines[len(lines)-1])
		if res.Reason != "oom" && mb > 64 {
			r.breach("RS-06: %s holds %d MB, more than half the memory limit of 128 MB", dir, mb)
		}
		r.note("%s: the fill ended %s with %d MB written", dir, res.Reason, mb)
		r.sh(id, "rm -f "+dir+"/fill")
	}
	if res := r.sh(id, "echo alive"); res.Stdout != "alive\n" {
		r.breach("RS-06: the sandbox did not survive the fills: %+v", res)
	}
	return nil
}

// FS-06: hard links to protected files and across the workspace boundary.
func fs06Control(r *run) error {
	res := r.sh(r.a(), "echo x > /workspace/a && ln /workspace/a /workspace/b && cat /workspace/b")
	if res.Stdout != "x\n" {
		return fmt.Errorf("control: a hard link inside the workspace: %+v", res)
	}
	return nil
}

func fs06Attack(r *run) error {
	res := r.sh(r.a(), `for t in /usr/bin/passwd /usr/bin/su /etc/passwd /proc/sys/kernel/hostname /dev/null; do
  ln $t /workspace/l 2>/dev/null && echo linked:$t; rm -f /workspace/l
done
setpriv --reuid=1000 --regid=1000 --clear-groups sh -c 'ln /etc/shadow /tmp/s 2>/dev/null && echo linked:shadow-as-user'
true`)
	if strings.Contains(res.Stdout, "linked:") {
		r.breach("FS-06: %q", res.Stdout)
	}
	return nil
}

// FS-08: magic links from inside, and as file-API paths.
func fs08Control(r *run) error {
	res := r.sh(r.a(), "echo own > /workspace/m && cat /proc/self/root/workspace/m && ls /proc/self/cwd/m")
	if !strings.Contains(res.Stdout, "own") {
		return fmt.Errorf("control: its own /proc/self/root: %+v", res)
	}
	return nil
}

func fs08Attack(r *run) error {
	id := r.a()
	res := r.sh(id, `ls /proc/1/root/ 2>/dev/null && echo agent-root
cat /proc/1/cwd/hostname 2>/dev/null && echo agent-cwd
for f in /proc/1/fd/*; do cat $f 2>/dev/null >/dev/null && echo agent-fd:$f; done
readlink /proc/self/root`)
	for _, bad := range []string{"agent-root", "agent-cwd", "agent-fd:"} {
		if strings.Contains(res.Stdout, bad) {
			r.breach("FS-08: %s reachable from inside: %q", bad, res.Stdout)
		}
	}
	// Through the file API: a magic link is refused, or resolves inside.
	for _, p := range []string{"/proc/self/root/etc/hostname", "/proc/1/root/etc/hostname", "/proc/self/cwd/m", "/proc/1/fd/3"} {
		st, b := r.api("GET", "/v1/sandboxes/"+id+"/files/read?path="+q(p), nil)
		if st == 200 && strings.Contains(string(b), r.s.canaryValue) {
			r.breach("FS-08: files/read %s = 200 with the host canary", p)
		}
		if st == 200 && p == "/proc/1/fd/3" {
			r.breach("FS-08: files/read of the agent's fd = 200 %.200s", b)
		}
	}
	return nil
}

// PV-01: setuid binaries and sudo as the sandbox's user do not elevate.
func pv01Control(r *run) error {
	res := r.sh(r.a(), "cp /usr/bin/id /workspace/suid-id && chmod u+s /workspace/suid-id && stat -c %A /workspace/suid-id && /workspace/suid-id -u")
	if !strings.Contains(res.Stdout, "rws") || !strings.HasSuffix(strings.TrimSpace(res.Stdout), "0") {
		return fmt.Errorf("control: a setuid copy of id, run as root: %+v", res)
	}
	return nil
}

func pv01Attack(r *run) error {
	res := r.sh(r.a(), `chmod 755 /workspace; cp /usr/bin/id /usr/local/bin/suid-id && chmod u+s /usr/local/bin/suid-id
for b in /workspace/suid-id /usr/local/bin/suid-id; do echo "$b $(setpriv --reuid=1000 --regid=1000 --clear-groups $b -u)"; done
setpriv --reuid=1000 --regid=1000 --clear-groups sh -c 'su -c "id -u" root </dev/null 2>/dev/null; sudo -n id -u 2>/dev/null; newgrp root </dev/null 2>/dev/null; true'`)
	for _, l := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && f[len(f)-1] == "0" {
			r.breach("PV-01: uid 0 as the user: %q", l)
		}
	}
	return nil
}

// RS-04: filling the disk, in the workspace and in the writable layer, stops
// at disk_mb inside; the host loses at most that; a sibling still writes.
func rs04Setup(r *run) error { r.create(map[string]any{"disk_mb": 64}); return nil }

func rs04Control(r *run) error {
	res := r.sh(r.a(), "head -c 16M /dev/zero > /workspace/ok && rm /workspace/ok && echo wrote")
	if !strings.Contains(res.Stdout, "wrote") {
		return fmt.Errorf("control: 16 MiB under a 64 MiB quota: %+v", res)
	}
	return nil
}

func rs04Attack(r *run) error {
	id := r.a()
	// What the host loses is what the data dir's disk image takes up on it:
	// its allocated blocks (the image is sparse, and gives back what the
	// sandboxes free). Measured on the image, not as the host's free space,
	// which everything else running on the host moves too.
	img := filepath.Join(r.d.dataDir, "backends", "native", "disk.img")
	before, err := allocated(img)
	if err != nil {
		return err
	}
	for _, c := range []struct{ where, cmd string }{
		{"workspace, fallocate", "fallocate -l 200M /workspace/fa 2>&1; echo rc=$?"},
		{"workspace, dd", "dd if=/dev/zero of=/workspace/dd bs=1M count=200 2>&1 | grep -v records; echo rc=$?"},
		{"writable layer, dd", "dd if=/dev/zero of=/usr/local/dd bs=1M count=200 2>&1 | grep -v records; echo rc=$?"},
	} {
		res := r.sh(id, c.cmd+"; sync; du -sm /workspace /usr/local | awk '{s+=$1} END {print \"total\", s}'")
		if !strings.Contains(res.Stdout, "quota exceeded") && !strings.Contains(res.Stdout, "No space left") {
			r.breach("RS-04 %s: no EDQUOT/ENOSPC at the quota: %q", c.where, res.Stdout)
		}
		r.sh(id, "rm -f /workspace/fa /workspace/dd /usr/local/dd")
	}
	rs04Subvolumes(r, id)
	// The pool's trimmer, woken by earlier rows' deletes, may be between
	// its metadata relocation (new blocks written) and its trim: what the
	// host loses is what stays, so a figure over the bound is read again
	// for a while before it counts.
	const bound = 64<<20 + 32<<20
	var after int64
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if after, err = allocated(img); err != nil {
			return err
		}
		if after-before <= bound || time.Now().After(deadline) {
			break
		}
	}
	r.note("the disk image took %d MiB more of the host after three fills and deletes", (after-before)>>20)
	if lost := after - before; lost > bound {
		r.breach("RS-04: the host lost %d MiB of free space to a 64 MiB quota (the disk image grew from %d to %d MiB)", lost>>20, before>>20, after>>20)
	}
	// Space comes back after deleting; the sibling and the daemon still write.
	if res := r.sh(id, "head -c 32M /dev/zero > /workspace/again && echo again"); !strings.Contains(res.Stdout, "again") {
		r.breach("RS-04: the space did not come back after deleting: %+v", res)
	}
	if res := r.sh(r.env.sibling, "head -c 8M /dev/zero > /tmp/s && echo sibling"); !strings.Contains(res.Stdout, "sibling") {
		r.breach("RS-04: the sibling cannot write: %+v", res)
	}
	// The exec that failed at the quota says why.
	res := r.exec(id, map[string]any{"argv": []string{"dd", "if=/dev/zero", "of=/workspace/full", "bs=1M", "count=200"}, "timeout": 60})
	if res.Reason != "disk_full" || res.ExitCode == 0 {
		r.breach("RS-04: dd past the quota ended %q (exit %d), want disk_full", res.Reason, res.ExitCode)
	}
	r.sh(id, "rm -f /workspace/full")
	// Control: a failure with room on the disk is not disk_full.
	if res := r.sh(id, "exit 3"); res.Reason != "exited" {
		r.breach("RS-04: a plain failure ended %q, want exited", res.Reason)
	}
	return nil
}

// rs04SubvolumeProbe asks btrfs, in the workspace (itself a subvolume of the
// quota filesystem), for a subvolume and a snapshot of the sandbox's own,
// whose quota groups no limit would bound; and, as the control, for a
// reflink copy: an ioctl of the same type on the same filesystem, allowed.
const rs04SubvolumeProbe = `
import errno, fcntl, os, struct
fd = os.open("/workspace", os.O_RDONLY)
def call(what, req, buf):
    try:
        fcntl.ioctl(fd, req, buf)
        print(what, "made")
    except OSError as e:
        print(what, errno.errorcode.get(e.errno, e.errno))
call("subvolume", 0x5000940e, bytearray(struct.pack("q4088s", 0, b"nested")))
call("subvolume-v2", 0x50009418, bytearray(struct.pack("qQQ32s4040s", 0, 0, 0, b"", b"nested2")))
call("snapshot-v2", 0x50009417, bytearray(struct.pack("qQQ32s4040s", fd, 0, 0, b"", b"snap")))
with open("/workspace/src", "wb") as f:
    f.write(b"x" * 65536)
src = os.open("/workspace/src", os.O_RDONLY)
dst = os.open("/workspace/dst", os.O_WRONLY | os.O_CREAT, 0o644)
try:
    fcntl.ioctl(dst, 0x40049409, src)  # FICLONE
    print("reflink made")
except OSError as e:
    print("reflink", errno.errorcode.get(e.errno, e.errno))
`

// rs04Subvolumes: a subvolume or snapshot of the sandbox's own would escape
// its disk_mb (and kept the daemon from deleting its directory in one call).
// Refused with EPERM; checked at the far end too: the sandbox's directory on
// the host holds no subvolume but its own.
func rs04Subvolumes(r *run, id string) {
	res := r.exec(id, map[string]any{"argv": []string{"python3", "-c", rs04SubvolumeProbe}, "timeout": 60})
	out := res.Stdout + res.Stderr
	if !strings.Contains(out, "reflink made") {
		r.breach("RS-04 control: a reflink copy in the workspace failed: %q", out)
	}
	for _, what := range []string{"subvolume", "subvolume-v2", "snapshot-v2"} {
		if !strings.Contains(out, what+" EPERM\n") {
			r.breach("RS-04: a btrfs %s in the workspace was not refused with EPERM: %q", what, out)
		}
	}
	dir := filepath.Join(poolDir(r.d.dataDir), id)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || path == dir {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		if st.Ino == 256 { // a subvolume's root directory
			r.breach("RS-04: the sandbox made a subvolume of its own: %s", path)
		}
		return nil
	})
	if err != nil {
		r.breach("RS-04: walking the sandbox's directory %s: %v", dir, err)
	}
	r.sh(id, "rm -f /workspace/src /workspace/dst")
}

// RS-05: millions of empty files stop at the quota: btrfs counts metadata.
func rs05Setup(r *run) error { r.create(map[string]any{"disk_mb": 16}); return nil }

func rs05Control(r *run) error {
	res := r.sh(r.a(), "mkdir /workspace/f && cd /workspace/f && for i in $(seq 100); do : > $i; done && ls | wc -l")
	if strings.TrimSpace(res.Stdout) != "100" {
		return fmt.Errorf("control: 100 files: %+v", res)
	}
	return nil
}

func rs05Attack(r *run) error {
	res := r.exec(r.a(), map[string]any{"command": `python3 -c '
import os
os.makedirs("/workspace/many", exist_ok=True)
n = 0
try:
    while n < 3000000:
        open("/workspace/many/%d" % n, "w").close(); n += 1
        if n % 5000 == 0: os.sync()
except OSError as e:
    print(n, e.errno)
else:
    print(n, 0)'`, "timeout": 300})
	f := strings.Fields(res.Stdout)
	if len(f) != 2 || f[1] == "0" {
		r.breach("RS-05: %q: the file count was not bounded", res.Stdout)
	} else {
		r.note("%s empty files fit 16 MiB (errno %s)", f[0], f[1])
	}
	r.sh(r.a(), "rm -rf /workspace/many")
	return nil
}

// allocated returns the bytes a file takes up on its filesystem.
func allocated(path string) (int64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("the data dir's disk image: %w", err)
	}
	return st.Blocks * 512, nil
}
