package console

import (
	"math"
	"regexp"
	"strconv"
	"testing"
)

// TestTextContrast: the style sheet's text colours reach WCAG AA's 4.5:1
// for normal text on each background they are drawn on. The muted grey
// (the counts beside a share, "none", a figure's label) was 4.0:1 on a red
// row and 4.4:1 on a yellow one.
func TestTextContrast(t *testing.T) {
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`--([a-z]+):#([0-9a-f]{6}|[0-9a-f]{3});`).FindAllStringSubmatch(consoleCSS, -1) {
		hex := m[2]
		if len(hex) == 3 { // #fff is #ffffff
			hex = string([]byte{hex[0], hex[0], hex[1], hex[1], hex[2], hex[2]})
		}
		vars[m[1]] = hex
	}
	for _, p := range []struct{ fg, bg string }{
		{"fg", "card"}, {"fg", "bg"}, {"muted", "card"}, {"muted", "bg"}, {"muted", "redbg"}, {"muted", "yellowbg"},
		{"red", "card"}, {"red", "redbg"}, {"yellow", "yellowbg"}, {"accent", "card"}, {"accent", "redbg"}, {"accent", "yellowbg"}, {"green", "card"},
	} {
		if vars[p.fg] == "" || vars[p.bg] == "" {
			t.Fatalf("console.css has no --%s or --%s", p.fg, p.bg)
		}
		if r := contrast(vars[p.fg], vars[p.bg]); r < 4.5 {
			t.Errorf("--%s on --%s: contrast %.2f:1, want at least 4.5:1", p.fg, p.bg, r)
		}
	}
}

// contrast is WCAG 2's contrast ratio of two RGB hex colours.
func contrast(a, b string) float64 {
	la, lb := luminance(a), luminance(b)
	return (math.Max(la, lb) + 0.05) / (math.Min(la, lb) + 0.05)
}

func luminance(hex string) float64 {
	var c [3]float64
	for i := range c {
		v, _ := strconv.ParseUint(hex[2*i:2*i+2], 16, 8)
		x := float64(v) / 255
		if x <= 0.03928 {
			c[i] = x / 12.92
		} else {
			c[i] = math.Pow((x+0.055)/1.055, 2.4)
		}
	}
	return 0.2126*c[0] + 0.7152*c[1] + 0.0722*c[2]
}
