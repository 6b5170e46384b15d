package sandbox

import "time"

// Network is a sandbox's network tier.
type Network string

const (
	NetworkNone      Network = "none"      // loopback only
	NetworkAllowlist Network = "allowlist" // through the egress proxy, listed hosts only
	NetworkFull      Network = "full"      // through the egress proxy, any host
	// NetworkHost is reported, never granted: the local backend's processes
	// use the host's network as they are.
	NetworkHost Network = "host"
)

// CreateRequest is what a caller asks for. Zero fields take the policy's defaults.
type CreateRequest struct {
	Template    string
	Timeout     time.Duration // TTL; 0 means the default
	MemoryBytes int64
	MilliCPUs   int64
	Pids        int64
	DiskBytes   int64
	Network     Network
	// NetworkAllow and NetworkBlock are the tier's lists: domains,
	// wildcards (*.example.com), addresses and CIDRs.
	NetworkAllow []string
	NetworkBlock []string
	Labels       map[string]string
	Env          map[string]string
	// Secrets maps environment variables to the names of secrets of the
	// caller's API key; the manager puts each secret's value (env mode) or
	// placeholder (proxy mode) in Env. Omitted from JSON when empty, so the
	// idempotency hash of a request without secrets is what it always was.
	Secrets map[string]string `json:",omitempty"`
}

// Spec is an admitted request: every field is set and within the policy's
// ceilings. Drivers translate it into their own form; wire types never reach them.
type Spec struct {
	ID          ID
	Template    string
	TTL         time.Duration
	MemoryBytes int64
	MilliCPUs   int64 // 1000 = one core
	Pids        int64
	DiskBytes   int64
	Network     Network
	// NetworkAllow and NetworkBlock are the tier's lists (CreateRequest).
	NetworkAllow []string `json:",omitempty"`
	NetworkBlock []string `json:",omitempty"`
	Labels       map[string]string
	Env          map[string]string
	// ProxySecrets names the proxy-mode secret behind each placeholder its
	// processes were given (placeholder → secret name): kept, unlike Env,
	// so a restarted daemon registers them with its egress proxy again.
	ProxySecrets map[string]string `json:",omitempty"`
	// RequireLayers are the isolation layers that must be applied; a driver that
	// cannot apply one fails Start with ErrIsolation naming it.
	RequireLayers []string
	// SeccompProfile and CapProfile name the seccomp profile and capability
	// set of the sandbox's processes (Policy); "" is "default".
	SeccompProfile string
	CapProfile     string
}

// Template names.
const TemplateHost = "host" // a read-only view of the host's /usr, /etc (minus secrets), /lib*, /bin, /sbin
