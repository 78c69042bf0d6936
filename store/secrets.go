package store

import (
	"cmp"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Store URLs carry credentials, and drivers quote URLs in their errors.
// These rules keep every form and every piece of a password out of errors,
// logs, status output and metrics:
//
//   - One reading decides where a URL's password is: net/url's, done here by
//     hand so that it also works where net/url gives up on the host (etcd's
//     h1:2379,h2 lists) or on the userinfo (a space in a password). The
//     authority runs from "://" to the first '/', '?' or '#'; the userinfo
//     ends at its LAST '@'; the password follows the userinfo's first ':'.
//     So a password may hold '@' and ':' as they are; '/', '?', '#' and '%'
//     must be percent-encoded.
//   - libpq (and pgx, which copies it) ends the userinfo at the FIRST '@'
//     instead: to them postgres://u:p@ss@h means password "p" on host
//     "ss@h", whose name then shows in "no such host". So no backend hands a
//     driver a URL with a password in it: [SplitURLPassword] takes the
//     password out and the backend sets it in the driver's configuration.
//   - A URL is shown with its secrets masked by position ([RedactURL]),
//     never by searching for the password's text.
//   - Text from elsewhere, such as a driver's error, is scrubbed of the
//     password's forms ([URLSecrets]) by [RedactString]: everywhere when the
//     password is distinctive (8 or more characters mixing letters with
//     digits or symbols, which ordinary text does not contain by chance);
//     otherwise only where it stands as a credential — between ':' and '@',
//     after password= and the like, or quoted whole — so that a password
//     such as "tcp", "a" or "postgres" does not turn "dial tcp" into
//     "dial xxxxx" or "postgres: connect" into "xxxxx: connect".

// mask replaces a secret.
const mask = "xxxxx"

var (
	// keywordSecretRE finds secrets in keyword/value connection strings
	// (host=h password=p), quoted or not.
	keywordSecretRE = regexp.MustCompile(`(?i)\b((?:password|passwd|pwd|secret|token)\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
	// secretKeyBeforeRE matches text that ends where a secret parameter's
	// value begins: password=, "token": ', sslpassword = and the like.
	secretKeyBeforeRE = regexp.MustCompile(`(?i)(?:password|passwd|pwd|secret|token)["']?\s*[=:]\s*["']?$`)
	// schemeRE is what net/url accepts as a scheme.
	schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.\-]*$`)
)

// secretParam reports whether a URL query parameter or connection keyword
// holds a secret: password, sslpassword, passwd, pwd, secret, token and
// names containing them.
func secretParam(name string) bool {
	name = strings.ToLower(name)
	for _, s := range []string{"password", "passwd", "pwd", "secret", "token"} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// urlParts locates, by byte offsets into a URL, what matters for its
// credentials. Offsets are -1 where the part is absent.
type urlParts struct {
	scheme             string
	authStart, authEnd int // raw[authStart:authEnd] is the authority
	colon              int // ':' between user and password
	at                 int // the '@' that ends the userinfo
}

// splitAuthority reads raw as scheme://authority…, as net/url does. ok is
// false when raw has no such authority (sqlite:path, host=h …).
func splitAuthority(raw string) (p urlParts, ok bool) {
	i := strings.Index(raw, "://")
	if i <= 0 || !schemeRE.MatchString(raw[:i]) {
		return urlParts{}, false
	}
	p = urlParts{scheme: raw[:i], authStart: i + 3, colon: -1, at: -1}
	p.authEnd = len(raw)
	if j := strings.IndexAny(raw[p.authStart:], "/?#"); j >= 0 {
		p.authEnd = p.authStart + j
	}
	if j := strings.LastIndexByte(raw[p.authStart:p.authEnd], '@'); j >= 0 {
		p.at = p.authStart + j
		if k := strings.IndexByte(raw[p.authStart:p.at], ':'); k >= 0 {
			p.colon = p.authStart + k
		}
	}
	return p, true
}

// password is the password as written, and whether there is one.
func (p urlParts) password(raw string) (string, bool) {
	if p.colon < 0 {
		return "", false
	}
	return raw[p.colon+1 : p.at], true
}

// strayAt reports an '@' after the authority, in the path, the fragment or
// a parameter's name: the mark of a password with an unencoded '/', '?' or
// '#', which ended the authority inside the password, so that its tail
// would be read as a path, a query or a fragment (postgres://u:1234/ss@h/db
// is host "u", port 1234, database "ss@h/db"). An '@' in a parameter's
// value is left alone: application_name=me@host is common. A URL without
// an authority (sqlite:///a@b.db) has no userinfo to lose.
func (p urlParts) strayAt(raw string) bool {
	if p.authEnd == p.authStart {
		return false
	}
	rest, fragment, _ := strings.Cut(raw[p.authEnd:], "#")
	path, query, _ := strings.Cut(rest, "?")
	if strings.Contains(path, "@") || strings.Contains(fragment, "@") {
		return true
	}
	for pair := range strings.SplitSeq(query, "&") {
		if name, _, _ := strings.Cut(pair, "="); strings.Contains(name, "@") {
			return true
		}
	}
	return false
}

// errStrayAt explains [urlParts.strayAt] without quoting the URL.
var errStrayAt = fmt.Errorf("an '@' after the host: percent-encode a password's '/', '?' and '#' "+
	"(%%2F, %%3F, %%23), and an '@' in a database or parameter name (%%40): %w", ErrInvalidURL)

// SplitURLPassword returns raw without its userinfo password, and the
// password decoded ("" when there is none). The user name is kept,
// re-encoded, so that every parser reads it the same way. A backend opens
// its driver on rest and sets the password in the driver's configuration,
// so that no driver reads a password by rules of its own (see the package
// notes on '@'), and no driver error can quote one.
//
// Strings that are not scheme://authority URLs are returned unchanged.
// Errors wrap [ErrInvalidURL] and never quote raw.
func SplitURLPassword(raw string) (rest, password string, err error) {
	p, ok := splitAuthority(raw)
	if !ok {
		return raw, "", nil
	}
	if p.strayAt(raw) {
		return "", "", errStrayAt
	}
	if p.at < 0 {
		return raw, "", nil
	}
	userEnd := p.at
	if p.colon >= 0 {
		userEnd = p.colon
	}
	user, err := url.PathUnescape(raw[p.authStart:userEnd])
	if err != nil {
		return "", "", fmt.Errorf("the user name has a bad %%-escape (write '%%' as %%25): %w", ErrInvalidURL)
	}
	if written, has := p.password(raw); has {
		if password, err = url.PathUnescape(written); err != nil {
			return "", "", fmt.Errorf("the password has a bad %%-escape (write '%%' as %%25): %w", ErrInvalidURL)
		}
	}
	rest = raw[:p.authStart]
	if user != "" {
		rest += url.User(user).String() + "@"
	}
	return rest + raw[p.at+1:], password, nil
}

// RedactURL returns raw with its password and secret parameters replaced by
// "xxxxx", for errors and logs; the rest stays as written. A string whose
// password cannot be located is reduced to its scheme.
func RedactURL(raw string) string {
	if keywordString(raw) {
		return keywordSecretRE.ReplaceAllString(raw, "${1}"+mask)
	}
	p, ok := splitAuthority(raw)
	switch {
	case ok && p.strayAt(raw):
		return p.scheme + "://<unparsable URL>"
	case ok && p.colon >= 0:
		raw = raw[:p.colon+1] + mask + raw[p.at:]
	case !ok:
		if _, has := opaqueUserinfo(raw); has {
			return schemeOf(raw) + "<unparsable URL>"
		}
		if _, err := url.Parse(raw); err != nil {
			return schemeOf(raw) + "<unparsable URL>"
		}
	}
	return mapSecretParams(raw, func(name, value string) (string, bool) { return name + "=" + mask, true })
}

// opaqueUserinfo finds, in a string without "://", what may be a password
// with the "//" forgotten: u:secret@h. A rooted path (sqlite:/a@b.db) is
// none.
func opaqueUserinfo(raw string) (string, bool) {
	i, j := strings.IndexByte(raw, ':'), strings.LastIndexByte(raw, '@')
	if i < 0 || j < i || strings.HasPrefix(raw[i+1:], "/") {
		return "", false
	}
	return raw[i+1 : j], true
}

// keywordString reports a keyword/value connection string (host=h
// password=p) rather than a URL.
func keywordString(raw string) bool {
	return schemeOf(raw) == "" && keywordSecretRE.MatchString(raw)
}

// schemeOf is raw's scheme and its ':', or "" when it has none.
func schemeOf(raw string) string {
	if i := strings.IndexByte(raw, ':'); i > 0 && schemeRE.MatchString(raw[:i]) {
		return raw[:i+1]
	}
	return ""
}

// URLWithoutSecrets returns raw without its password and secret parameters
// — removed, not masked — so that it still names the same store for a
// process that brings its own credentials (.pgpass, PGPASSWORD). Errors
// wrap [ErrInvalidURL] and never quote raw.
func URLWithoutSecrets(raw string) (string, error) {
	if keywordString(raw) {
		return "", fmt.Errorf("a keyword/value connection string, not a URL: %w", ErrInvalidURL)
	}
	rest, _, err := SplitURLPassword(raw)
	if err != nil {
		return "", err
	}
	return mapSecretParams(rest, func(string, string) (string, bool) { return "", false }), nil
}

// mapSecretParams rewrites every name=value pair of raw's query whose name
// is a secret's with fn (keep false drops the pair), leaving every other
// byte of raw as written. The query runs from the first '?' to the next
// '#', as net/url reads it.
func mapSecretParams(raw string, fn func(name, value string) (pair string, keep bool)) string {
	head, query, found := strings.Cut(raw, "?")
	if !found {
		return raw
	}
	query, fragment, hasFragment := strings.Cut(query, "#")
	var pairs []string
	for pair := range strings.SplitSeq(query, "&") {
		name, value, _ := strings.Cut(pair, "=")
		if dec, err := url.QueryUnescape(name); err == nil {
			name = dec
		}
		if secretParam(name) {
			var keep bool
			if pair, keep = fn(name, value); !keep {
				continue
			}
		}
		pairs = append(pairs, pair)
	}
	out := head
	if len(pairs) > 0 {
		out += "?" + strings.Join(pairs, "&")
	}
	if hasFragment {
		out += "#" + fragment
	}
	return out
}

// URLSecrets returns every form of every secret in a store URL, longest
// first, for [RedactString] or [RedactError] to scrub from text that may
// quote any form of the URL: the userinfo password and the values of
// secret parameters, each as written, decoded and re-encoded the ways
// net/url and drivers print them. It works on URLs that do not parse, and
// on keyword/value connection strings.
func URLSecrets(raw string) []string {
	var out []string
	add := func(written string, unescape func(string) (string, error)) {
		if written == "" {
			return
		}
		out = append(out, written)
		dec, err := unescape(written)
		if err != nil || dec == "" {
			return
		}
		out = append(out, dec, url.QueryEscape(dec), url.PathEscape(dec),
			strings.TrimPrefix(url.UserPassword("", dec).String(), ":"))
	}
	p, ok := splitAuthority(raw)
	switch {
	case ok && p.strayAt(raw):
		// Where the password ends is anyone's guess: take all that may be
		// it, from the user's ':' to the last '@'.
		if i := strings.IndexByte(raw[p.authStart:], ':'); i >= 0 {
			if j := strings.LastIndexByte(raw, '@'); j > p.authStart+i {
				add(raw[p.authStart+i+1:j], url.PathUnescape)
			}
		}
	case ok:
		if pw, has := p.password(raw); has {
			add(pw, url.PathUnescape)
		}
	default:
		if pw, has := opaqueUserinfo(raw); has {
			add(pw, url.PathUnescape)
		}
	}
	mapSecretParams(raw, func(name, value string) (string, bool) {
		add(value, url.QueryUnescape)
		return "", true
	})
	if keywordString(raw) {
		for _, m := range keywordSecretRE.FindAllStringSubmatch(raw, -1) {
			add(strings.Trim(m[2], "'"), func(s string) (string, error) { return s, nil })
		}
	}
	// Longest first, so a secret that contains another is replaced whole.
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	return slices.Compact(out)
}

// RedactString returns s with each non-empty secret replaced by "xxxxx", in
// the order given (longest first, as [URLSecrets] returns them, replaces a
// secret that contains another whole). A distinctive secret — 8 or more
// characters mixing letters with digits or symbols — is replaced wherever
// it occurs; any other only where it stands as a credential: between ':'
// and '@', as the value after password=, secret=, token= and the like, or
// quoted whole. Ordinary words ("tcp", "host", "postgres") then stay
// readable when they happen to be the password, and the password still
// never shows as one.
func RedactString(s string, secrets ...string) string {
	for _, sec := range secrets {
		switch {
		case sec == "":
		case distinctive(sec):
			s = strings.ReplaceAll(s, sec, mask)
		default:
			s = replaceCredential(s, sec)
		}
	}
	return s
}

// distinctive reports whether text containing sec most likely quotes it
// rather than saying something else.
func distinctive(sec string) bool {
	if utf8.RuneCountInString(sec) < 8 {
		return false
	}
	letter := strings.IndexFunc(sec, unicode.IsLetter) >= 0
	other := strings.IndexFunc(sec, func(r rune) bool { return !unicode.IsLetter(r) }) >= 0
	return letter && other
}

// replaceCredential replaces the occurrences of sec in s that stand as a
// credential.
func replaceCredential(s, sec string) string {
	var b strings.Builder
	done := 0
	for from := 0; from <= len(s)-len(sec); {
		i := strings.Index(s[from:], sec)
		if i < 0 {
			break
		}
		start, end := from+i, from+i+len(sec)
		if !asCredential(s[:start], s[end:]) {
			from = start + 1
			continue
		}
		b.WriteString(s[done:start])
		b.WriteString(mask)
		done, from = end, end
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// asCredential reports whether text between before and after stands as a
// credential.
func asCredential(before, after string) bool {
	if before == "" {
		return false
	}
	last := before[len(before)-1]
	switch {
	case last == ':' && strings.HasPrefix(after, "@"):
		return true // userinfo
	case strings.IndexByte("\"'`", last) >= 0 && after != "" && after[0] == last:
		return true // quoted whole
	}
	if len(before) > 64 {
		before = before[len(before)-64:]
	}
	return secretKeyBeforeRE.MatchString(before) && (after == "" || strings.IndexByte(" \t\r\n\"'`&;,)", after[0]) >= 0)
}

// RedactError returns err with [RedactString] applied to its message, for
// wrapping driver errors that might echo a connection string. errors.Is and
// errors.As still see through it.
func RedactError(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	redacted := RedactString(msg, secrets...)
	if redacted == msg {
		return err
	}
	return &redactedError{msg: redacted, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }

// Unwrap keeps errors.Is working for sentinels such as context.Canceled;
// the wrapped error's own text is never printed through this type.
func (e *redactedError) Unwrap() error { return e.err }
