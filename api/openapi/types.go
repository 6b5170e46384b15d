// This file holds the Go form of the JSON bodies of /v1, as openapi.json
// describes them. Field names are snake_case with units in the name; durations
// on the wire are whole seconds (timeout) or milliseconds (duration_ms).
//
// Text fields that carry bytes from a sandbox (stdout, stderr, file content,
// stream data) are UTF-8 strings in which invalid sequences read as U+FFFD; when
// the bytes are not valid UTF-8, a sibling *_base64 field carries them exactly.

package openapi

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrorBody is every error response: {"error":{…}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail describes one failure.
type ErrorDetail struct {
	// Code is a Connect code name: not_found, invalid_argument, …
	Code string `json:"code"`
	// Message is for the caller: "get 3x…: sandbox not found".
	Message string `json:"message"`
	// Op is the operation that failed ("create", "exec", …), when known.
	Op string `json:"op,omitempty"`
	// SandboxID is the sandbox the failure concerns, when there is one.
	SandboxID string `json:"sandbox_id,omitempty"`
	// RequestID matches the X-Request-Id response header and the daemon's log.
	RequestID string `json:"request_id,omitempty"`
}

// Error codes, Connect's code names plus sbx's own.
const (
	CodeNotFound             = "not_found"
	CodeAlreadyExists        = "already_exists"
	CodeInvalidArgument      = "invalid_argument"
	CodeFailedPrecondition   = "failed_precondition"
	CodePermissionDenied     = "permission_denied"
	CodeResourceExhausted    = "resource_exhausted"
	CodeUnavailable          = "unavailable"
	CodeDeadlineExceeded     = "deadline_exceeded"
	CodeOutOfRange           = "out_of_range"
	CodeIsolationUnavailable = "isolation_unavailable"
	CodeAgentLost            = "agent_lost"
	CodeInsufficientStorage  = "insufficient_storage"
	CodeUnauthenticated      = "unauthenticated"
	CodeUnimplemented        = "unimplemented"
	CodeInternal             = "internal"
)

// CreateSandboxRequest is the body of POST /v1/sandboxes. Absent fields take
// the operator's defaults; a present field must be valid (timeout 0 is refused).
type CreateSandboxRequest struct {
	Template string `json:"template,omitempty"`
	// Timeout is the time to live in seconds.
	Timeout  *int64            `json:"timeout,omitempty"`
	MemoryMB *int64            `json:"memory_mb,omitempty"`
	CPUs     *float64          `json:"cpus,omitempty"`
	Pids     *int64            `json:"pids,omitempty"`
	DiskMB   *int64            `json:"disk_mb,omitempty"`
	Network  *NetworkPolicy    `json:"network,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	// Secrets maps environment variables to the names of secrets of the
	// caller's API key (POST /v1/secrets): each gets the secret's value (env
	// mode) or the egress proxy's placeholder for it (proxy mode).
	Secrets map[string]string `json:"secrets,omitempty"`
}

// NetworkPolicy is a sandbox's network tier and its lists: the body of PUT
// /v1/sandboxes/{id}/network, and "network" on create, where the tier's name
// alone ("network": "full") also does.
type NetworkPolicy struct {
	// Mode is none (loopback only), allowlist or full; host for a sandbox
	// of the local backend (reported, never asked for).
	Mode string `json:"mode"`
	// Allow (allowlist only) and Block list domains, wildcards
	// (*.example.com), IP addresses and CIDRs; Block wins.
	Allow []string `json:"allow,omitempty"`
	Block []string `json:"block,omitempty"`
}

// UnmarshalJSON takes the object or the tier's name alone.
func (n *NetworkPolicy) UnmarshalJSON(b []byte) error {
	var mode string
	if json.Unmarshal(b, &mode) == nil {
		*n = NetworkPolicy{Mode: mode}
		return nil
	}
	type plain NetworkPolicy
	return json.Unmarshal(b, (*plain)(n))
}

// NetworkEvents is the answer of GET /v1/sandboxes/{id}/network/events.
type NetworkEvents struct {
	// Allowed and Refused count every decision since the sandbox started
	// (or since the daemon did); Events are the latest, oldest first.
	Allowed int64          `json:"allowed"`
	Refused int64          `json:"refused"`
	Events  []NetworkEvent `json:"events"`
}

// NetworkEvent is one egress decision about a sandbox's traffic.
type NetworkEvent struct {
	Time time.Time `json:"time"`
	// Destination is where the sandbox asked to go: host:port, or a DNS name.
	Destination string `json:"destination"`
	// Protocol is http, tls, connect, tcp or dns.
	Protocol string `json:"protocol"`
	// Rule is the rule that decided, or why the traffic was refused.
	Rule    string `json:"rule"`
	Allowed bool   `json:"allowed"`
}

// UpdateSandboxRequest is the body of PATCH /v1/sandboxes/{id}.
type UpdateSandboxRequest struct {
	// Timeout, when set, makes the sandbox expire this many seconds from now.
	Timeout *int64 `json:"timeout,omitempty"`
	// Labels, when set, replace the labels.
	Labels map[string]string `json:"labels,omitempty"`
}

// Sandbox is one sandbox.
type Sandbox struct {
	ID        string            `json:"id"`
	State     string            `json:"state"`
	Backend   string            `json:"backend"`
	Template  string            `json:"template"`
	CreatedAt time.Time         `json:"created_at"`
	ExpiresAt time.Time         `json:"expires_at"`
	Limits    Limits            `json:"limits"`
	Network   NetworkPolicy     `json:"network"`
	Labels    map[string]string `json:"labels"`
	Isolation Isolation         `json:"isolation"`
	// StateReason says why the sandbox is in state error or recovery_required.
	StateReason string `json:"state_reason,omitempty"`
	// PublicPorts are the ports served by preview URLs without a token.
	PublicPorts []int `json:"public_ports"`
}

// Limits are a sandbox's admitted limits.
type Limits struct {
	MemoryMB int64   `json:"memory_mb"`
	CPUs     float64 `json:"cpus"`
	Pids     int64   `json:"pids"`
	DiskMB   int64   `json:"disk_mb"`
	// Timeout is the time to live given at create, in seconds.
	Timeout int64 `json:"timeout"`
}

// Isolation is what a sandbox actually has enforced.
type Isolation struct {
	Backend string `json:"backend"`
	// Level is the tier, carrying any gap: "native", "native-minus-seccomp", "none".
	Level string `json:"level"`
	// Layers maps each layer (pidns, cgroup, seccomp, …) to applied | missing | n/a.
	Layers         map[string]string `json:"layers"`
	LandlockABI    int               `json:"landlock_abi"`
	SeccompProfile string            `json:"seccomp_profile,omitempty"`
	Cgroup         string            `json:"cgroup"`
	AcceptedGaps   []string          `json:"accepted_gaps"`
	// Sandbox is false when the backend is not a sandbox at all (local).
	Sandbox bool   `json:"sandbox"`
	Warning string `json:"warning,omitempty"`
}

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec: exactly one of
// Command (run by /bin/sh -c) and Argv (run verbatim, no shell).
type ExecRequest struct {
	Command string            `json:"command,omitempty"`
	Argv    []string          `json:"argv,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Secrets maps environment variables of this process to the names of
	// secrets of the caller's API key, as on create.
	Secrets map[string]string `json:"secrets,omitempty"`
	// Stdin is text for the process's stdin; StdinBase64 the same as bytes.
	Stdin       *string `json:"stdin,omitempty"`
	StdinBase64 *string `json:"stdin_base64,omitempty"`
	// KeepStdinOpen leaves stdin open after Stdin, for POST …/stdin.
	KeepStdinOpen bool `json:"keep_stdin_open,omitempty"`
	// Timeout in seconds, 1–3600; absent means 60.
	Timeout *int64 `json:"timeout,omitempty"`
	// Background returns 202 once the process started; it keeps running.
	Background       bool   `json:"background,omitempty"`
	OutputLimitBytes *int64 `json:"output_limit_bytes,omitempty"`
	Tag              string `json:"tag,omitempty"`
	// StreamBounded asks a streamed exec for a bounded live view: the
	// process never waits for a slow reader; what the reader misses is
	// dropped and reported by dropped events. A stream is otherwise complete:
	// a slow reader slows the process, bounded by its timeout.
	StreamBounded bool `json:"stream_bounded,omitempty"`
	// Pty runs the command in a terminal of this size: its stdout carries
	// the terminal's output, stderr stays empty, and GET …/pty?process=
	// attaches to it.
	Pty *PtySize `json:"pty,omitempty"`
}

// ExecResult is how a process ended and what it printed.
type ExecResult struct {
	ProcessID string `json:"process_id"`
	PID       int    `json:"pid"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	// StdoutBase64 and StderrBase64 are set when the output is not valid UTF-8.
	StdoutBase64 string `json:"stdout_base64,omitempty"`
	StderrBase64 string `json:"stderr_base64,omitempty"`
	// ExitCode is the command's own code; 128+n for signal n; 124 on timeout.
	ExitCode int `json:"exit_code"`
	// Reason: exited | signaled | timeout | oom | killed | pids_exhausted | agent_lost.
	Reason     string `json:"reason"`
	Signal     int    `json:"signal"`
	DurationMS int64  `json:"duration_ms"`
	// Truncated: head and tail are kept; the full streams are at the paths.
	Truncated     bool   `json:"truncated"`
	StdoutDropped int64  `json:"stdout_dropped"`
	StderrDropped int64  `json:"stderr_dropped"`
	StdoutPath    string `json:"stdout_path,omitempty"`
	StderrPath    string `json:"stderr_path,omitempty"`
	StdoutBytes   int64  `json:"stdout_bytes"`
	StderrBytes   int64  `json:"stderr_bytes"`
}

// ProcessStarted is the 202 body of a background exec.
type ProcessStarted struct {
	ProcessID string `json:"process_id"`
	PID       int    `json:"pid"`
}

// Stream event types of an exec or attach stream (NDJSON or SSE).
const (
	EventStarted = "started"
	EventStdout  = "stdout"
	EventStderr  = "stderr"
	EventDropped = "dropped"
	EventResult  = "result"
	EventError   = "error"
)

// Text returns b as a JSON-safe string (invalid UTF-8 read as U+FFFD) and,
// when b is not valid UTF-8, its exact bytes in base64: the data and
// data_base64 of an output event, the stdout and stdout_base64 of a result.
func Text(b []byte) (s, b64 string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), base64.StdEncoding.EncodeToString(b)
}

// FramesMediaType is the binary form of an exec or attach stream, for
// clients that want the output's bytes as they came, at the cost of the
// stream only: a sequence of frames, each an 8-byte header (kind, three zero
// bytes, the payload's length as a big-endian uint32) and its payload. A
// stdout or stderr frame carries the bytes themselves; an event frame carries
// any other Event (started, dropped, result, error) as one JSON object, as
// NDJSON would. Asked for with ?stream=frames or this Accept type.
const FramesMediaType = "application/vnd.sbx.frames"

// Frame kinds of FramesMediaType.
const (
	FrameEvent  = 0
	FrameStdout = 1
	FrameStderr = 2
)

// Event is one line of a stream. Type says which fields are set: started has
// process_id and pid; stdout and stderr have data (and data_base64 when the
// chunk is not valid UTF-8); dropped has stream and bytes (output not
// delivered at that point: a bounded live view, or a replay of head and tail
// only); result has the ExecResult fields inline; error has error.
type Event struct {
	Type string `json:"type"`
	// Started.
	ProcessID string `json:"process_id,omitempty"`
	PID       int    `json:"pid,omitempty"`
	// Stdout, stderr.
	Data       string `json:"data,omitempty"`
	DataBase64 string `json:"data_base64,omitempty"`
	// Dropped.
	Stream string `json:"stream,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"`
	// Result: the result's fields, inline on the wire.
	Result *ExecResult `json:"-"`
	// Error.
	Error *ErrorDetail `json:"error,omitempty"`
	// Raw is a stdout or stderr frame's bytes (FramesMediaType), never on
	// the wire as JSON.
	Raw []byte `json:"-"`
}

// MarshalJSON writes a result event's fields inline.
func (e Event) MarshalJSON() ([]byte, error) {
	if e.Type == EventResult && e.Result != nil {
		return json.Marshal(struct {
			Type string `json:"type"`
			ExecResult
		}{e.Type, *e.Result})
	}
	type plain Event
	return json.Marshal(plain(e))
}

// UnmarshalJSON reads a result event's inline fields into Result.
func (e *Event) UnmarshalJSON(b []byte) error {
	type plain Event
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*e = Event(p)
	if e.Type == EventResult {
		var r ExecResult
		if err := json.Unmarshal(b, &r); err != nil {
			return err
		}
		e.Result = &r
		e.ProcessID, e.PID = r.ProcessID, r.PID
	}
	return nil
}

// Process is a process the sandbox's agent runs or ran.
type Process struct {
	ProcessID string   `json:"process_id"`
	PID       int      `json:"pid"`
	Argv      []string `json:"argv"`
	Cwd       string   `json:"cwd,omitempty"`
	Tag       string   `json:"tag,omitempty"`
	// State is running or exited.
	State     string      `json:"state"`
	StartedAt time.Time   `json:"started_at"`
	Result    *ExecResult `json:"result,omitempty"`
}

// ProcessList is the body of GET …/processes.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// WaitRequest is the body of POST …/processes/{pid}/wait.
type WaitRequest struct {
	// Timeout in seconds, 0–3600; 0 answers at once; absent means 60.
	Timeout *int64 `json:"timeout,omitempty"`
}

// StdinRequest is the body of POST …/processes/{pid}/stdin.
type StdinRequest struct {
	Data       *string `json:"data,omitempty"`
	DataBase64 *string `json:"data_base64,omitempty"`
	// EOF closes the process's stdin after the data.
	EOF bool `json:"eof,omitempty"`
}

// SignalRequest is the body of POST …/processes/{pid}/signal. Signal is a name
// ("SIGTERM", "TERM") or a number (15, "15").
type SignalRequest struct {
	Signal json.RawMessage `json:"signal"`
}

// SignalResponse says what the signal did: stopped | signaled | already_exited.
type SignalResponse struct {
	Outcome string `json:"outcome"`
}

// FileInfo describes one entry of a sandbox's filesystem.
type FileInfo struct {
	Name string `json:"name"`
	Path string `json:"path"`
	// Type is file | dir | symlink | other.
	Type string `json:"type"`
	Size int64  `json:"size"`
	// Mode is the permission bits in octal: "0644".
	Mode          string    `json:"mode"`
	Permissions   string    `json:"permissions,omitempty"`
	Owner         string    `json:"owner,omitempty"`
	Group         string    `json:"group,omitempty"`
	ModifiedAt    time.Time `json:"modified_at"`
	SymlinkTarget string    `json:"symlink_target,omitempty"`
}

// FileContent is one page of a file: GET …/files/read.
type FileContent struct {
	Path          string `json:"path"`
	Content       string `json:"content"`
	ContentBase64 string `json:"content_base64,omitempty"`
	// Size is the whole file's; Offset where this page starts; Length its bytes.
	Size   int64 `json:"size"`
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
	EOF    bool  `json:"eof"`
}

// WriteFileRequest is the body of PUT …/files/write: one of Content and
// ContentBase64. Mode is an octal string ("0644") or the number itself (420).
type WriteFileRequest struct {
	Path          string          `json:"path"`
	Content       *string         `json:"content,omitempty"`
	ContentBase64 *string         `json:"content_base64,omitempty"`
	Mode          json.RawMessage `json:"mode,omitempty"`
	Append        bool            `json:"append,omitempty"`
}

// PathRequest is the body of POST …/files/mkdir.
type PathRequest struct {
	Path string `json:"path"`
}

// MoveRequest is the body of POST …/files/move.
type MoveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

// FileList is the body of GET …/files/list.
type FileList struct {
	Entries []FileInfo `json:"entries"`
}

// GlobResult is the body of GET …/files/glob.
type GlobResult struct {
	Paths     []string `json:"paths"`
	Truncated bool     `json:"truncated"`
}

// GrepMatch is one matching line.
type GrepMatch struct {
	Path string `json:"path"`
	Line int64  `json:"line"`
	Text string `json:"text"`
}

// GrepResult is the body of GET …/files/grep.
type GrepResult struct {
	Matches   []GrepMatch `json:"matches"`
	Truncated bool        `json:"truncated"`
}

// Health is the body of GET /v1/health.
type Health struct {
	// Status is ok when a backend can create sandboxes, else degraded.
	Status   string          `json:"status"`
	Backends []BackendHealth `json:"backends"`
	// Pool is the warm pool; absent when it is off.
	Pool *PoolHealth `json:"pool,omitempty"`
	// Quarantined are the sandboxes whose teardown failed and is retried.
	Quarantined []string `json:"quarantined,omitempty"`
}

// PoolHealth is the warm pool: its target size and the sandboxes ready to be
// handed out.
type PoolHealth struct {
	Size  int `json:"size"`
	Ready int `json:"ready"`
}

// BackendHealth is one configured backend's probe.
type BackendHealth struct {
	Name      string            `json:"name"`
	Available bool              `json:"available"`
	Primary   bool              `json:"primary"`
	Level     string            `json:"level"`
	Sandbox   bool              `json:"sandbox"`
	Layers    map[string]string `json:"layers"`
	// LayerReasons says why this host cannot apply each missing layer.
	LayerReasons map[string]string `json:"layer_reasons,omitempty"`
	Reasons      []string          `json:"reasons"`
	// Templates are the templates a sandbox may be made from on this
	// backend, host first; absent when it passes any name on (e2b).
	Templates []string `json:"templates,omitempty"`
}

// IdempotencyKeyHeader makes POST /v1/sandboxes idempotent for its caller.
const IdempotencyKeyHeader = "Idempotency-Key"

// AuditRecord is one audited call: GET /v1/audit. It names paths, argv[0] and
// process ids, never file contents, environment values, stdin or secrets.
type AuditRecord struct {
	ID        int64     `json:"id"`
	Time      time.Time `json:"time"`
	KeyID     string    `json:"key_id"`
	SandboxID string    `json:"sandbox_id"`
	// Action is create, delete, expire, update, exec_start, exec_end,
	// write_stdin, signal, resize, pty_attach, pty_detach, read_file,
	// write_file, stat, list_dir, make_dir, move, remove, glob, grep,
	// download, upload, recover_destroy, set_secret or delete_secret.
	Action string `json:"action"`
	// Target is the path, argv[0] or process id acted on.
	Target string `json:"target"`
	// Outcome is "ok" or the error's code.
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
}

// AuditList is the body of GET /v1/audit, newest first.
type AuditList struct {
	Records []AuditRecord `json:"records"`
}

// ToolList is the answer of GET /v1/tools.
type ToolList struct {
	Tools []ToolInfo `json:"tools"`
}

// ToolInfo describes one agent tool: call it with POST
// /v1/sandboxes/{id}/tools/{name}, its arguments as the body.
type ToolInfo struct {
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description"`
	// Capability is what an API key needs to call the tool.
	Capability   string          `json:"capability"`
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema"`
}

// KeyCreate is the body of POST /v1/keys.
type KeyCreate struct {
	Name string `json:"name"`
	// Capabilities the key holds; omitted means every capability ("*").
	Capabilities []string `json:"capabilities,omitempty"`
}

// KeyInfo is an API key; Secret is set only in the answer that made it.
type KeyInfo struct {
	ID           string   `json:"id"`
	Name         string   `json:"name"`
	Capabilities []string `json:"capabilities"`
	CreatedAt    string   `json:"created_at"`
	RevokedAt    string   `json:"revoked_at,omitempty"`
	Secret       string   `json:"secret,omitempty"`
}

// KeyList is the answer of GET /v1/keys.
type KeyList struct {
	Keys []KeyInfo `json:"keys"`
}

// SecretCreate is the body of POST /v1/secrets.
type SecretCreate struct {
	// Name is 1-128 of A-Z a-z 0-9 . _ -, unique among the key's secrets.
	Name string `json:"name"`
	// Value is the secret itself, at most 64 KiB: write-only, never shown.
	Value string `json:"value"`
	// Mode is env (the default: the value in the environment) or proxy (a
	// placeholder there; the egress proxy sends the value to Hosts only).
	Mode string `json:"mode,omitempty"`
	// Hosts are the names and wildcards (*.example.com) a proxy-mode value
	// may be sent to; required in proxy mode, none in env mode.
	Hosts []string `json:"hosts,omitempty"`
}

// SecretInfo is a secret as its key sees it: never its value.
type SecretInfo struct {
	Name      string    `json:"name"`
	Mode      string    `json:"mode"`
	Hosts     []string  `json:"hosts"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SecretList is the answer of GET /v1/secrets.
type SecretList struct {
	Secrets []SecretInfo `json:"secrets"`
}
