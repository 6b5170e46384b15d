//go:build !linux || !amd64

package forker

import "errors"

// SharedSupported says the spawner's children share its memory until their
// exec (sharedStart): its child is assembly written for linux/amd64 only;
// elsewhere the spawner forks through os/exec.
const SharedSupported = false

func sharedStart(Request, []int, int) (int, int, error) {
	return -1, -1, errors.New("forker: no shared-memory clone on this architecture")
}
