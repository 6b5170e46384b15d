package sandbox

import "time"

// State is where a sandbox is in its life.
type State string

const (
	StateCreating         State = "creating"
	StateRunning          State = "running"
	StateStopped          State = "stopped" // its processes ended; resources still held
	StateError            State = "error"
	StateDeleting         State = "deleting"
	StateRecoveryRequired State = "recovery_required"
	StateQuarantined      State = "quarantined"
	// StateWarm is a sandbox started ahead of demand, not yet handed to anyone.
	StateWarm State = "warm"
)

// Sandbox is the record of one sandbox, as the store keeps it and the API shows it.
type Sandbox struct {
	ID        ID
	State     State
	Backend   string
	Spec      Spec
	Isolation Isolation
	CreatedAt time.Time
	ExpiresAt time.Time
	// Error says why the sandbox is in StateError or StateRecoveryRequired.
	Error string
	// Saved is the driver's private record for Recover.
	Saved []byte
	// OwnerKey is the id of the API key that created the sandbox: its limits
	// count it. Empty for warm sandboxes not yet handed out, and for sandboxes
	// created before owners were recorded.
	OwnerKey string
}

// Exit is how a sandbox's agent (its init) ended.
type Exit struct {
	Code   int
	Signal int
	Reason string
}
