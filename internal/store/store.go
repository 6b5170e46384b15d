// Package store keeps sandbox records and API keys in an embedded SQLite file
// (modernc.org/sqlite, pure Go), with versioned migrations.
package store

// Store is safe for concurrent use.
type Store struct{}
