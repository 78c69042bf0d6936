package store_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/tenure-dev/tenure/store"
)

func TestURLSecretsFindsPasswordsEvenInURLsThatDoNotParse(t *testing.T) {
	const pw = "p@ss/w rd"
	for name, tc := range map[string]struct {
		raw  string
		want []string // each must be among the secrets
	}{
		"userinfo":             {"postgres://u:p%40ss%2Fw%20rd@h/db", []string{pw, "p%40ss%2Fw%20rd"}},
		"query parameter":      {"mysql://u@h/db?password=p%40ss%2Fw+rd&x=1", []string{pw, "p%40ss%2Fw+rd"}},
		"parameter named *pwd": {"mysql://u@h/db?db_password=s3cr3t", []string{"s3cr3t"}},
		"bad port":             {"postgres://u:s3cr3t@h:port/db", []string{"s3cr3t"}},
		"bad escape":           {"postgres://u:pa%zzs3cr3t@h/db", []string{"pa%zzs3cr3t"}},
		"keyword/value":        {"host=h password='s3 cr3t' user=u", []string{"s3 cr3t"}},
	} {
		t.Run(strings.ReplaceAll(name, " ", "-"), func(t *testing.T) {
			got := store.URLSecrets(tc.raw)
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("URLSecrets(%q) = %q, want %q among them", tc.raw, got, w)
				}
			}
			for i := 1; i < len(got); i++ {
				if len(got[i]) > len(got[i-1]) {
					t.Errorf("URLSecrets(%q) = %q: not longest first", tc.raw, got)
				}
			}
			if shown := store.RedactString(tc.raw, got...); strings.Contains(shown, "s3cr3t") || strings.Contains(shown, "p%40ss") {
				t.Errorf("RedactString(%q) = %q still shows the password", tc.raw, shown)
			}
		})
	}
	if got := store.URLSecrets("redis://h:6379/0"); len(got) != 0 {
		t.Errorf("URLSecrets of a URL without a password = %q", got)
	}
}

func TestRedactStringReplacesTheLongestSecretWholeAndIgnoresEmptyOnes(t *testing.T) {
	got := store.RedactString("dial u:abcd@h: abc", "abcd", "", "abc")
	if got != "dial u:xxxxx@h: xxxxx" {
		t.Fatalf("RedactString = %q", got)
	}
}
