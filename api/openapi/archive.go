package openapi

// ArchiveSkip is an archive entry an extraction left out, and why.
type ArchiveSkip struct {
	Name string `json:"name"`
	// Type is "char device", "block device", "fifo" or `type "X"` for other
	// tar entry types.
	Type   string `json:"type"`
	Reason string `json:"reason"`
}

// ArchiveResult is the body of PUT …/files/archive.
type ArchiveResult struct {
	// Path is the destination directory.
	Path string `json:"path"`
	// Entries counts the archive entries written (directories included);
	// Bytes the file content written.
	Entries int64 `json:"entries"`
	Bytes   int64 `json:"bytes"`
	// Skipped lists the first 100 entries left out; SkippedCount counts all.
	Skipped      []ArchiveSkip `json:"skipped"`
	SkippedCount int64         `json:"skipped_count"`
}
