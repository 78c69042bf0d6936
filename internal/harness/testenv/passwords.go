package testenv

import (
	"net/url"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// HardPasswords are passwords that leaked, or got garbled messages, on the
// way from a store URL to an error: characters that mean something in a
// URL, and words that messages are made of.
var HardPasswords = []string{
	"p@ss", "p@ss:w0rd", "Qx7:Zr9", "Qx7/Zr9", "1234/Zr9", "1234?Zr9", "Qx7?Zr9", "Qx7#Zr9",
	"Qx7%Zr9", "p%40ss", "Qx7 Zr9", "pässwörd✓",
	"postgres", "redis", "mysql", "etcd", "sql", "tcp", "host", "dial", "lookup", "refused", "s", "a",
}

// UnreachableURLs are store URLs of every scheme that has passwords, each
// with the password PW, on a port where nothing listens. Each fails fast,
// refused at once; the connect timeouts only bound a machine so loaded
// that a refusal comes late (with 2 s, one of two twins once timed out
// where the other was refused, and their messages differed).
var UnreachableURLs = []string{
	"postgres://app:PW@127.0.0.1:1/db?connect_timeout=10",
	"postgresql://app:PW@127.0.0.1:1/db?connect_timeout=10&table=t",
	"mysql://root:PW@127.0.0.1:1/db?timeout=10s",
	"redis://:PW@127.0.0.1:1/0?dial_timeout=1s&max_retries=-1",
	"rediss://u:PW@127.0.0.1:1/0?dial_timeout=1s&max_retries=-1&namespace=n",
	"etcd://u:PW@127.0.0.1:1?dial_timeout=300ms",
	"etcd+https://u:PW@127.0.0.1:1,127.0.0.1:2?dial_timeout=300ms&prefix=p",
}

// Writings returns the ways pw goes into a URL's userinfo: as typed, and
// percent-encoded when that differs.
func Writings(pw string) []string {
	escaped := strings.TrimPrefix(url.UserPassword("", pw).String(), ":")
	if escaped == pw {
		return []string{pw}
	}
	return []string{pw, escaped}
}

// Misread reports whether written, in a URL's userinfo, cannot be read
// back as one password: an unencoded '/', '?' or '#' ends the authority
// inside it, and a '%' must start an escape. Such a URL is malformed.
func Misread(written string) bool {
	_, err := url.PathUnescape(written)
	return err != nil || strings.ContainsAny(written, "/?#")
}

// Twin returns written with every ASCII letter and digit replaced by
// another (rot13, rot5) and percent-escapes kept, so that it is written
// the same way and is as distinctive, but shares no word with written.
func Twin(written string) string {
	var b strings.Builder
	for i := 0; i < len(written); {
		if written[i] == '%' {
			end := min(i+3, len(written))
			b.WriteString(written[i:end])
			i = end
			continue
		}
		r, n := utf8.DecodeRuneInString(written[i:])
		switch {
		case 'a' <= r && r <= 'z':
			r = 'a' + (r-'a'+13)%26
		case 'A' <= r && r <= 'Z':
			r = 'A' + (r-'A'+13)%26
		case '0' <= r && r <= '9':
			r = '0' + (r-'0'+5)%10
		}
		b.WriteRune(r)
		i += n
	}
	return b.String()
}

// garbledRE finds a mask stuck to a letter or digit: a secret replaced
// inside a word ("tcxxxxx"), or two masks run together.
var garbledRE = regexp.MustCompile(`[\p{L}\p{N}]xxxxx|xxxxx[\p{L}\p{N}]`)

// CheckHidesPassword fails the test when msg, made from a URL holding pw
// as written, shows pw, its writing or a distinctive piece of it (one of
// three or more characters that is no lowercase word), has text garbled
// by the masking, or differs from twinMsg, made from the same URL with
// Twin(written) in its place: a message that neither shows nor garbles the
// password does not depend on it.
func CheckHidesPassword(t testing.TB, pw, written, msg, twinMsg string) {
	t.Helper()
	if msg != twinMsg {
		t.Errorf("the message depends on the password %q:\n  %s\nwith %q instead:\n  %s", written, msg, Twin(written), twinMsg)
	}
	if m := garbledRE.FindString(msg); m != "" {
		t.Errorf("the masking garbled the message (%q): %s", m, msg)
	}
	pieces := strings.FieldsFunc(pw, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	for _, s := range append(pieces, pw, written) {
		if utf8.RuneCountInString(s) >= 3 && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz") != "" && strings.Contains(msg, s) {
			t.Errorf("the message shows %q of the password %q: %s", s, written, msg)
		}
	}
}
