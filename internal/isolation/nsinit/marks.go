// This file implements the marks of a start: when the init stage and the
// agent after it reached each step, reported to the backend (boot.Report.Marks).

package nsinit

import (
	"golang.org/x/sys/unix"

	"sbx.dev/sbx/api/agent/boot"
)

// marks are the steps this process has marked, in order.
var marks []boot.Mark

// Mark records that this process has just done step.
func Mark(step string) {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) == nil {
		marks = append(marks, boot.Mark{Step: step, Mono: ts.Nano()})
	}
}

// Marks returns the steps marked so far.
func Marks() []boot.Mark { return marks }
