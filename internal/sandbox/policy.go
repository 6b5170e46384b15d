package sandbox

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

const (
	MiB = 1 << 20
	GiB = 1 << 30
)

// Policy is the operator's bounds on every request: defaults fill what a caller
// leaves out, ceilings refuse what it asks beyond them.
type Policy struct {
	DefaultTTL time.Duration `json:"default_ttl"`
	MaxTTL     time.Duration `json:"max_ttl"`

	DefaultMemoryBytes int64 `json:"default_memory_bytes"`
	MaxMemoryBytes     int64 `json:"max_memory_bytes"`
	// MinMemoryBytes is what the agent itself needs to serve.
	MinMemoryBytes int64 `json:"min_memory_bytes"`

	DefaultMilliCPUs int64 `json:"default_milli_cpus"`
	MaxMilliCPUs     int64 `json:"max_milli_cpus"`

	DefaultPids int64 `json:"default_pids"`
	MaxPids     int64 `json:"max_pids"`
	MinPids     int64 `json:"min_pids"`

	DefaultDiskBytes int64 `json:"default_disk_bytes"`
	MaxDiskBytes     int64 `json:"max_disk_bytes"`
	// MinDiskBytes is what a sandbox's own files need at start (its upper
	// layers' metadata, the agent's spill directory).
	MinDiskBytes int64 `json:"min_disk_bytes"`

	// Networks are the tiers a caller may ask for; the first is the default.
	Networks []Network `json:"networks"`

	DefaultExecTimeout time.Duration `json:"default_exec_timeout"`
	MaxExecTimeout     time.Duration `json:"max_exec_timeout"`
	// OutputLimitBytes is the per-stream cap of an exec result.
	OutputLimitBytes int64 `json:"output_limit_bytes"`

	Templates []string `json:"templates"`
	// RequireLayers must be applied, unless named in AllowMissing: a create
	// that cannot apply one fails with ErrIsolation naming it. Accepting a gap
	// shows in the sandbox's level name ("native-minus-landlock").
	RequireLayers []string `json:"require_layers"`
	AllowMissing  []string `json:"allow_missing"`
	// SeccompProfile names the seccomp profile every sandboxed process runs
	// under ("default"; "nested-userns" lets it make user namespaces).
	SeccompProfile string `json:"seccomp_profile"`
	// CapProfile names the capabilities the sandbox's root keeps ("default";
	// "docker" adds MKNOD, SETFCAP, AUDIT_WRITE, NET_RAW and SYS_CHROOT).
	CapProfile string `json:"cap_profile"`
}

// DefaultPolicy returns the strict defaults.
func DefaultPolicy() Policy {
	return Policy{
		DefaultTTL:         300 * time.Second,
		MaxTTL:             24 * time.Hour,
		DefaultMemoryBytes: 512 * MiB,
		MaxMemoryBytes:     8 * GiB,
		MinMemoryBytes:     32 * MiB,
		DefaultMilliCPUs:   1000,
		MaxMilliCPUs:       16000,
		DefaultPids:        512,
		MaxPids:            32768,
		MinPids:            16,
		DefaultDiskBytes:   1 * GiB,
		MaxDiskBytes:       64 * GiB,
		MinDiskBytes:       16 * MiB,
		Networks:           []Network{NetworkNone},
		DefaultExecTimeout: 60 * time.Second,
		MaxExecTimeout:     3600 * time.Second,
		OutputLimitBytes:   1 * MiB,
		Templates:          []string{TemplateHost},
		// Every layer: a host that cannot apply one refuses creates, naming
		// it, until the operator accepts the gap in AllowMissing.
		RequireLayers:  slices.Clone(AllLayers),
		SeccompProfile: "default",
		CapProfile:     "default",
	}
}

// Check reports every inconsistency in the policy, each naming its field.
func (p Policy) Check() error {
	var errs []error
	pair := func(name string, def, max, min int64) {
		if def < min || def > max {
			errs = append(errs, fmt.Errorf("policy.default_%s: %d is outside [%d, %d]", name, def, min, max))
		}
	}
	pair("memory_bytes", p.DefaultMemoryBytes, p.MaxMemoryBytes, p.MinMemoryBytes)
	pair("pids", p.DefaultPids, p.MaxPids, p.MinPids)
	pair("milli_cpus", p.DefaultMilliCPUs, p.MaxMilliCPUs, 1)
	pair("disk_bytes", p.DefaultDiskBytes, p.MaxDiskBytes, p.MinDiskBytes)
	if p.DefaultTTL <= 0 || p.DefaultTTL > p.MaxTTL {
		errs = append(errs, fmt.Errorf("policy.default_ttl: %s is outside (0, %s]", p.DefaultTTL, p.MaxTTL))
	}
	if p.DefaultExecTimeout <= 0 || p.DefaultExecTimeout > p.MaxExecTimeout {
		errs = append(errs, fmt.Errorf("policy.default_exec_timeout: %s is outside (0, %s]", p.DefaultExecTimeout, p.MaxExecTimeout))
	}
	if len(p.Networks) == 0 {
		errs = append(errs, errors.New("policy.networks: empty"))
	}
	for _, n := range p.Networks {
		if !slices.Contains([]Network{NetworkNone, NetworkAllowlist, NetworkFull}, n) {
			errs = append(errs, fmt.Errorf("policy.networks: unknown tier %q (known: none, allowlist, full)", n))
		}
	}
	if len(p.Templates) == 0 {
		errs = append(errs, errors.New("policy.templates: empty"))
	}
	for _, l := range append(slices.Clone(p.RequireLayers), p.AllowMissing...) {
		if !slices.Contains(AllLayers, l) {
			errs = append(errs, fmt.Errorf("policy: unknown isolation layer %q", l))
		}
	}
	return errors.Join(errs...)
}

// admitNetwork checks a tier and its lists against the policy; an empty
// tier is the policy's default.
func (p Policy) admitNetwork(s *Spec) error {
	if s.Network == "" {
		s.Network = p.Networks[0]
	}
	if !slices.Contains([]Network{NetworkNone, NetworkAllowlist, NetworkFull}, s.Network) {
		return Invalid("network.mode", "unknown mode %q (known: none, allowlist, full)", s.Network)
	}
	if !slices.Contains(p.Networks, s.Network) {
		return Invalid("network.mode", "%q is not allowed here (allowed: %v)", s.Network, p.Networks)
	}
	return nil // the lists are the manager's to compile
}

// AdmitNetwork checks a change of a running sandbox's tier and lists, as
// create would.
func (p Policy) AdmitNetwork(tier Network, allow, block []string) (Spec, error) {
	s := Spec{Network: tier, NetworkAllow: slices.Clone(allow), NetworkBlock: slices.Clone(block)}
	if tier == "" {
		return s, Invalid("network.mode", "missing (want none, allowlist or full)")
	}
	return s, p.admitNetwork(&s)
}

// Admit checks req against the ceilings and fills defaults. Errors wrap ErrInvalid
// and name the field and the bound, in the caller's units.
func (p Policy) Admit(req CreateRequest) (Spec, error) {
	s := Spec{
		Template:    req.Template,
		TTL:         req.Timeout,
		MemoryBytes: req.MemoryBytes,
		MilliCPUs:   req.MilliCPUs,
		Pids:        req.Pids,
		DiskBytes:   req.DiskBytes,
		Network:     req.Network,
		Labels:      maps.Clone(req.Labels),
		Env:         maps.Clone(req.Env),

		SeccompProfile: p.SeccompProfile,
		CapProfile:     p.CapProfile,
	}
	var errs []error
	if s.Template == "" {
		s.Template = p.Templates[0]
	} else if !slices.Contains(p.Templates, s.Template) {
		errs = append(errs, Invalid("template", "%q is not one of %v", s.Template, p.Templates))
	}
	switch {
	case s.TTL == 0:
		s.TTL = p.DefaultTTL
	case s.TTL < time.Second || s.TTL > p.MaxTTL:
		errs = append(errs, Invalid("timeout", "%d s is outside [1, %d] s", int64(s.TTL/time.Second), int64(p.MaxTTL/time.Second)))
	}
	switch {
	case s.MemoryBytes == 0:
		s.MemoryBytes = p.DefaultMemoryBytes
	case s.MemoryBytes < p.MinMemoryBytes:
		errs = append(errs, Invalid("memory_mb", "%d MB is below the %d MB the sandbox's agent needs", s.MemoryBytes/MiB, p.MinMemoryBytes/MiB))
	case s.MemoryBytes > p.MaxMemoryBytes:
		errs = append(errs, Invalid("memory_mb", "%d MB is above the limit of %d MB", s.MemoryBytes/MiB, p.MaxMemoryBytes/MiB))
	}
	switch {
	case s.MilliCPUs == 0:
		s.MilliCPUs = p.DefaultMilliCPUs
	case s.MilliCPUs < 10 || s.MilliCPUs > p.MaxMilliCPUs:
		errs = append(errs, Invalid("cpus", "%.2f is outside [0.01, %.2f]", float64(s.MilliCPUs)/1000, float64(p.MaxMilliCPUs)/1000))
	}
	switch {
	case s.Pids == 0:
		s.Pids = p.DefaultPids
	case s.Pids < p.MinPids || s.Pids > p.MaxPids:
		errs = append(errs, Invalid("pids", "%d is outside [%d, %d]", s.Pids, p.MinPids, p.MaxPids))
	}
	switch {
	case s.DiskBytes == 0:
		s.DiskBytes = p.DefaultDiskBytes
	case s.DiskBytes < p.MinDiskBytes:
		errs = append(errs, Invalid("disk_mb", "%d MB is below the %d MB a sandbox's own files need", s.DiskBytes/MiB, p.MinDiskBytes/MiB))
	case s.DiskBytes > p.MaxDiskBytes:
		errs = append(errs, Invalid("disk_mb", "%d MB is above the limit of %d MB", s.DiskBytes/MiB, p.MaxDiskBytes/MiB))
	}
	s.NetworkAllow, s.NetworkBlock = slices.Clone(req.NetworkAllow), slices.Clone(req.NetworkBlock)
	if err := p.admitNetwork(&s); err != nil {
		errs = append(errs, err)
	}
	for k, v := range s.Labels {
		if k == "" || len(k) > 63 || len(v) > 255 {
			errs = append(errs, Invalid("labels", "label %q: keys are 1-63 bytes, values at most 255", truncate(k, 80)))
		}
	}
	if len(s.Labels) > 64 {
		errs = append(errs, Invalid("labels", "%d labels, at most 64", len(s.Labels)))
	}
	for k := range s.Env {
		if !validEnvName(k) {
			errs = append(errs, Invalid("env", "%q is not a valid variable name", truncate(k, 80)))
		}
	}
	errs = append(errs, checkSecretRefs(req.Secrets, req.Env))
	for _, l := range p.RequireLayers {
		if !slices.Contains(p.AllowMissing, l) {
			s.RequireLayers = append(s.RequireLayers, l)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// AdmitExec checks an exec request and fills its timeout. timeout 0 means default;
// wire layers reject an explicit 0 before calling (it is not a valid value there).
func (p Policy) AdmitExec(req ExecRequest) (ExecRequest, error) {
	errs := []error{req.Check()}
	switch {
	case req.Timeout == 0:
		req.Timeout = p.DefaultExecTimeout
	case req.Timeout < 0 || req.Timeout > p.MaxExecTimeout:
		errs = append(errs, Invalid("timeout", "%d s is outside [1, %d] s", int64(req.Timeout/time.Second), int64(p.MaxExecTimeout/time.Second)))
	}
	for k := range req.Env {
		if !validEnvName(k) {
			errs = append(errs, Invalid("env", "%q is not a valid variable name", truncate(k, 80)))
		}
	}
	errs = append(errs, checkSecretRefs(req.Secrets, req.Env))
	if req.OutputLimitBytes == 0 {
		req.OutputLimitBytes = p.OutputLimitBytes
	} else if req.OutputLimitBytes < 1024 || req.OutputLimitBytes > 64*MiB {
		errs = append(errs, Invalid("output_limit_bytes", "%d is outside [1024, %d]", req.OutputLimitBytes, 64*MiB))
	}
	return req, errors.Join(errs...)
}

// MaxSecretRefs bounds the secrets one create or exec may name.
const MaxSecretRefs = 64

// checkSecretRefs checks the shape of a request's secrets (variable → secret
// name): valid variable names, none also in env, a name for each. Whether
// the secrets exist is the manager's to say.
func checkSecretRefs(refs, env map[string]string) error {
	var errs []error
	if len(refs) > MaxSecretRefs {
		errs = append(errs, Invalid("secrets", "%d secrets, at most %d", len(refs), MaxSecretRefs))
	}
	for k, name := range refs {
		switch _, dup := env[k]; {
		case !validEnvName(k):
			errs = append(errs, Invalid("secrets", "%q is not a valid variable name", truncate(k, 80)))
		case dup:
			errs = append(errs, Invalid("secrets", "%s is also given in env; give each variable once", k))
		case name == "":
			errs = append(errs, Invalid("secrets", "%s: no secret name", k))
		}
	}
	return errors.Join(errs...)
}

func validEnvName(k string) bool {
	if k == "" || len(k) > 255 {
		return false
	}
	for i, c := range k {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
