// Package sandbox holds the domain nouns of sbx: sandbox ids, the admitted Spec and
// the Policy that admits it, the isolation actually applied, lifecycle states, exec
// and file values, and the closed set of error classes. It imports nothing of sbx.
package sandbox
