package store

import (
	"cmp"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

var (
	// userinfoPasswordRE finds the password of a userinfo even where
	// net/url gives up on the rest of the string (a bad port, a bad escape).
	userinfoPasswordRE = regexp.MustCompile(`://[^/@]*?:([^@/]*)@`)
	// paramPasswordRE finds password=… in a query or a keyword/value
	// connection string, quoted or not.
	paramPasswordRE = regexp.MustCompile(`(?i)password=('(?:[^'\\]|\\.)*'|[^&\s]+)`)
)

// URLSecrets returns every password-looking part of a store URL — the
// userinfo password and the values of parameters named like "password", as
// written and escaped — even when raw does not parse, longest first. A
// backend passes them to [RedactError] or [RedactString] to scrub a driver
// error or message that may quote any form of the URL.
func URLSecrets(raw string) []string {
	var out []string
	if u, err := url.Parse(raw); err == nil {
		if u.User != nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				out = append(out, pw, url.QueryEscape(pw), url.PathEscape(pw))
			}
		}
		for k, vs := range u.Query() {
			if strings.Contains(strings.ToLower(k), "password") {
				for _, v := range vs {
					if v != "" {
						out = append(out, v, url.QueryEscape(v))
					}
				}
			}
		}
	}
	for _, m := range userinfoPasswordRE.FindAllStringSubmatch(raw, -1) {
		if m[1] != "" {
			out = append(out, m[1])
			if dec, err := url.PathUnescape(m[1]); err == nil && dec != "" {
				out = append(out, dec)
			}
		}
	}
	for _, m := range paramPasswordRE.FindAllStringSubmatch(raw, -1) {
		if v := strings.Trim(m[1], "'"); v != "" {
			out = append(out, v)
		}
	}
	// Longest first, so a secret that contains another is replaced whole.
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	return slices.Compact(out)
}

// RedactString returns s with every occurrence of each non-empty secret
// replaced by "xxxxx", in the order given (longest first, as [URLSecrets]
// returns them, replaces a secret that contains another whole).
func RedactString(s string, secrets ...string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "xxxxx")
		}
	}
	return s
}
