package seccomp

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Profile is a seccomp profile: rules over a deny list, after the rules of
// the profile it Extends (if any) and the floor.
type Profile struct {
	Name    string `json:"name"`
	Extends string `json:"extends,omitempty"`
	Rules   []Rule `json:"rules"`
}

// Rule denies the syscalls Names, when all of Args hold (or always, without
// Args).
type Rule struct {
	Names []string `json:"names"`
	// Action is "errno" (the default) or "kill_process".
	Action string `json:"action,omitempty"`
	// Errno is what the call returns with the errno action: "EPERM" (the
	// default), "ENOSYS", ….
	Errno string `json:"errno,omitempty"`
	Args  []Arg  `json:"args,omitempty"`
}

// Arg is a condition on one of a syscall's six arguments.
type Arg struct {
	Index uint32 `json:"index"`
	// Op is "eq", "ne", "bits_set" (any of Value's bits set) or
	// "bits_clear" (none of them set) on the 64-bit argument, or "eq32" and
	// "ne32" on its low 32 bits (for arguments the kernel reads as 32-bit
	// ints, whose high bits the caller may set at will).
	Op    string `json:"op"`
	Value uint64 `json:"value"`
}

// nsFlags are the clone and unshare flags that make a namespace.
const nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWTIME

// floor is denied under every profile: the calls of its first rule always,
// btrfs's subvolume ioctls (btrfsSubvolumeRules) too.
var floor = Profile{Name: "floor", Rules: append([]Rule{{Names: []string{
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "bpf",
	"mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr",
	"keyctl", "add_key", "request_key", "reboot", "swapon", "swapoff", "open_by_handle_at", "perf_event_open",
}}}, btrfsSubvolumeRules...)}

// btrfs's ioctls that make, delete or re-flag a subvolume or snapshot. A
// sandbox's workspace is a subvolume of the daemon's quota filesystem: a
// subvolume made inside it would have a quota group of its own, unlimited,
// so whatever the sandbox wrote there would escape its disk_mb, and it would
// keep the daemon from deleting the sandbox's directory in one call. Reflinks
// (FICLONE, FICLONERANGE, FIDEDUPERANGE share btrfs's ioctl type) stay
// allowed: they are copies within the quota. The kernel reads the request's
// 32 bits.
var btrfsSubvolumeRules = func() []Rule {
	const (
		snapCreate     = 0x50009401 // BTRFS_IOC_SNAP_CREATE: _IOW(0x94, 1, struct btrfs_ioctl_vol_args)
		subvolCreate   = 0x5000940e // BTRFS_IOC_SUBVOL_CREATE: _IOW(0x94, 14, struct btrfs_ioctl_vol_args)
		snapDestroy    = 0x5000940f // BTRFS_IOC_SNAP_DESTROY: _IOW(0x94, 15, struct btrfs_ioctl_vol_args)
		snapCreateV2   = 0x50009417 // BTRFS_IOC_SNAP_CREATE_V2: _IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2)
		subvolCreateV2 = 0x50009418 // BTRFS_IOC_SUBVOL_CREATE_V2: _IOW(0x94, 24, struct btrfs_ioctl_vol_args_v2)
		subvolSetFlags = 0x4008941a // BTRFS_IOC_SUBVOL_SETFLAGS: _IOW(0x94, 26, __u64)
		snapDestroyV2  = 0x5000943f // BTRFS_IOC_SNAP_DESTROY_V2: _IOW(0x94, 63, struct btrfs_ioctl_vol_args_v2)
	)
	var rules []Rule
	for _, req := range []uint64{snapCreate, subvolCreate, snapDestroy, snapCreateV2, subvolCreateV2, subvolSetFlags, snapDestroyV2} {
		rules = append(rules, Rule{Names: []string{"ioctl"}, Args: []Arg{{Index: 1, Op: "eq32", Value: req}}})
	}
	return rules
}()

// common are the rules of every built-in profile.
var common = []Rule{
	{Names: []string{
		"userfaultfd", "name_to_handle_at", "acct", "syslog", "quotactl", "quotactl_fd",
		"fanotify_init", "lookup_dcookie", "vhangup", "iopl", "ioperm", "uselib", "ustat", "sysfs",
		"_sysctl", "create_module", "get_kernel_syms", "query_module", "nfsservctl",
		// Clock setters; adjtimex stays, which ntp tools read the clock's
		// state through (setting needs CAP_SYS_TIME, which no sandbox has).
		"settimeofday", "clock_settime", "clock_adjtime",
	}},
	{Names: []string{"io_uring_setup", "io_uring_enter", "io_uring_register"}, Errno: "ENOSYS"},
	// glibc's clone3 wrapper passes its function pointer in the third
	// register; Go's runtime passes 0 (see the package comment).
	{Names: []string{"clone3"}, Errno: "ENOSYS", Args: []Arg{{Index: 2, Op: "ne", Value: 0}}},
	// PER_LINUX and the query only: other personalities change the address
	// space layout or the syscall ABI. The kernel reads 32 bits.
	{Names: []string{"personality"}, Args: []Arg{{Index: 0, Op: "ne32", Value: 0}, {Index: 0, Op: "ne32", Value: 0xffffffff}}},
	// Typing into a terminal's input (CVE-2017-5226). The kernel reads the
	// request's 32 bits, so the high ones must not hide it.
	{Names: []string{"ioctl"}, Args: []Arg{{Index: 1, Op: "eq32", Value: unix.TIOCSTI}}},
	{Names: []string{"ioctl"}, Args: []Arg{{Index: 1, Op: "eq32", Value: unix.TIOCLINUX}}},
}

// nsRules deny new namespaces and joining others.
var nsRules = []Rule{
	{Names: []string{"unshare"}, Args: []Arg{{Index: 0, Op: "bits_set", Value: nsFlags}}},
	{Names: []string{"clone"}, Args: []Arg{{Index: 0, Op: "bits_set", Value: nsFlags}}},
	{Names: []string{"setns"}},
}

// builtin are the profiles sbx ships.
var builtin = []Profile{
	{Name: "default", Rules: append(slices.Clone(common), nsRules...)},
	// nested-userns is for sandboxes that run sandboxes of their own
	// (bubblewrap, rootless containers): new namespaces allowed; the mount
	// family stays denied by the floor.
	{Name: "nested-userns", Rules: slices.Clone(common)},
}

var (
	mu       sync.Mutex
	profiles = map[string]Profile{} // guarded by mu
)

// Lookup returns the profile called name.
func Lookup(name string) (Profile, error) {
	mu.Lock()
	defer mu.Unlock()
	if p, ok := profiles[name]; ok {
		return p, nil
	}
	for _, p := range builtin {
		if p.Name == name {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("unknown seccomp profile %q (known: %s)", name, strings.Join(namesLocked(), ", "))
}

func namesLocked() []string {
	var out []string
	for _, p := range builtin {
		out = append(out, p.Name)
	}
	for n := range profiles {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Register adds an operator's profile, after checking it compiles.
func Register(p Profile) error {
	if _, err := Compile(p); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range builtin {
		if b.Name == p.Name {
			return fmt.Errorf("seccomp profile %q: a built-in profile has that name", p.Name)
		}
	}
	profiles[p.Name] = p
	return nil
}

// Parse reads a profile from JSON, refusing unknown fields.
func Parse(js []byte) (Profile, error) {
	var p Profile
	dec := json.NewDecoder(strings.NewReader(string(js)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Profile{}, fmt.Errorf("seccomp profile: %w", err)
	}
	return p, nil
}
