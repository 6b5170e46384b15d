package openapi

import "encoding/json"

// The terminal route GET /v1/sandboxes/{id}/pty speaks WebSocket. Binary
// frames carry the terminal's raw bytes both ways (to it: keystrokes; from
// it: output); text frames carry one PtyMessage each.
const (
	// PtySubprotocol is the WebSocket subprotocol of the terminal route;
	// the daemon echoes it back, and nothing else, when the client offers it.
	PtySubprotocol = "sbx.pty.v1"
	// PtyBearerPrefix prefixes the API key offered as a subprotocol
	// ("bearer.<API key>", alongside PtySubprotocol) by a client that cannot
	// set the Authorization header of a WebSocket: a browser.
	PtyBearerPrefix = "bearer."
	// PtyMaxSize is the most rows, and the most columns, a terminal may have.
	PtyMaxSize = 1000
)

// Types of PtyMessage.
const (
	PtyResize  = "resize"  // client: set the terminal's size to Rows × Cols
	PtySignal  = "signal"  // client: send Signal to the process
	PtyStarted = "started" // server, first: the process followed
	PtyExit    = "exit"    // server, last before a normal close: how it ended
	PtyError   = "error"   // server: a control message refused, or the terminal lost
)

// PtyMessage is one control message of the terminal route; Type says which
// fields it carries.
type PtyMessage struct {
	Type string `json:"type"`
	// Rows and Cols: resize, 1–PtyMaxSize each.
	Rows int `json:"rows,omitempty"`
	Cols int `json:"cols,omitempty"`
	// Signal: signal, a number (2) or a name ("SIGINT", "INT"); exit, the
	// number of the signal that ended the process, when one did.
	Signal json.RawMessage `json:"signal,omitempty"`
	// Process and PID: started, the agent's process id (for the process
	// routes, and ?process= to attach again) and the pid in the sandbox.
	Process string `json:"process,omitempty"`
	PID     int    `json:"pid,omitempty"`
	// ExitCode and Reason: exit, as ExecResult has them.
	ExitCode *int   `json:"exit_code,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Error: error, the API's error object.
	Error *ErrorDetail `json:"error,omitempty"`
}

// PtySize is a terminal's size in character cells: the pty of an
// ExecRequest.
type PtySize struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}
