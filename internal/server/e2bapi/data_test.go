package e2bapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// unwrapOnly is a ResponseWriter wrapper that offers Flush only through
// Unwrap, as the API's own request logger does.
type unwrapOnly struct{ http.ResponseWriter }

func (u unwrapOnly) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// TestStatusRecorderFlush checks that a flush of the Start stream's
// recorder reaches the connection through a wrapper that only unwraps.
func TestStatusRecorderFlush(t *testing.T) {
	rec := httptest.NewRecorder()
	w := &statusRecorder{ResponseWriter: unwrapOnly{rec}}
	w.Write([]byte("start"))
	if rec.Flushed {
		t.Fatal("flushed before Flush")
	}
	if err := http.NewResponseController(w).Flush(); err != nil {
		t.Fatalf("Flush through the recorder: %v", err)
	}
	if !rec.Flushed {
		t.Error("Flush through the recorder did not reach the connection's writer")
	}
	if w.status != http.StatusOK {
		t.Errorf("status = %d, want 200", w.status)
	}
}
