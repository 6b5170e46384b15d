// Package nsinit is the jail's init stage: started by the native backend inside new
// namespaces, it applies the remaining containment steps in order, then execs the
// agent. It knows nothing of sandboxes beyond the plan it is handed.
package nsinit

// Main runs the init stage. It never returns.
func Main() { panic("unimplemented") }
