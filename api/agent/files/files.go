// Package files holds the JSON answers of the agent's plain-HTTP file routes
// (beside envd's /files): what the agent writes, the daemon reads, and the
// backends' fake agent imitates.
package files

// ArchiveResult is POST /files/archive's answer: the tar body extracted
// beneath Path.
type ArchiveResult struct {
	Path    string `json:"path"`
	Entries int64  `json:"entries"`
	Bytes   int64  `json:"bytes"`
	// Skipped are the first entries not extracted, and why; SkippedCount
	// counts them all.
	Skipped      []ArchiveSkip `json:"skipped"`
	SkippedCount int64         `json:"skipped_count"`
}

// ArchiveSkip is one entry of an archive that was not extracted.
type ArchiveSkip struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	Reason string `json:"reason"`
}
