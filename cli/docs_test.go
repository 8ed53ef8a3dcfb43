package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFlagDocsKeepParentheses: the configuration reference drops the
// "env COUPOND_X" a usage names (the table has a column for it) but not
// the parenthesis around it: "(default http://ADDR; env COUPOND_BASE_URL)"
// lost its ")" and the README showed "(default http://ADDR".
func TestFlagDocsKeepParentheses(t *testing.T) {
	for _, tc := range []struct{ usage, want string }{
		{"listen address (env COUPOND_ADDR)", "listen address"},
		{"external base URL (default http://ADDR; env COUPOND_BASE_URL)", "external base URL (default http://ADDR)"},
		{"data directory (env COUPOND_DATA_DIR); serve creates it", "data directory; serve creates it"},
		{"console address, empty for none (env COUPOND_CONSOLE_ADDR); sign in", "console address, empty for none; sign in"},
		{"sizes like 512MiB (auto: larger; 0 disables; env COUPOND_DISK_RESERVE)", "sizes like 512MiB (auto: larger; 0 disables)"},
		{"no variable named", "no variable named"},
	} {
		if diff := cmp.Diff(tc.want, envNote.ReplaceAllString(tc.usage, "")); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tc.usage, diff)
		}
	}
	var doc bytes.Buffer
	if err := writeFlagDocs(&doc, newRoot(&app{})); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(doc.String(), "\n") {
		cells := strings.Split(line, " | ")
		desc := cells[len(cells)-1]
		if strings.Count(desc, "(") != strings.Count(desc, ")") || strings.Contains(desc, "env COUPOND_") {
			t.Errorf("description with unbalanced parentheses or its variable left in: %s", line)
		}
	}
}
