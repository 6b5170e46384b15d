//go:build sbxfault

package fault

import (
	"os"
	"sync"
	"syscall"
)

// Enabled reports whether this binary was built with the sbxfault tag.
const Enabled = true

// armed is the point named by SBX_FAULT, read at the first Point.
var armed = sync.OnceValue(func() string { return os.Getenv(Env) })

// Point kills this process with SIGKILL when SBX_FAULT names it: no deferred
// call, no cleanup, as a power cut or the OOM killer would end the daemon.
func Point(name string) {
	if name == "" || name != armed() {
		return
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL cannot be caught; wait for it to land
}
