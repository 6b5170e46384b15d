package local

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// goneSoon reports whether pid is gone or a zombie within 10 s: its last
// parent reaps it asynchronously.
func goneSoon(pid int) bool {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && strings.HasPrefix(string(b[i+1:]), " Z") {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
