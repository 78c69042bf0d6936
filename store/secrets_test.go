package store_test

import (
	"errors"
	"fmt"
	"net/url"
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
		"userinfo":              {"postgres://u:p%40ss%2Fw%20rd@h/db", []string{pw, "p%40ss%2Fw%20rd"}},
		"query parameter":       {"mysql://u@h/db?password=p%40ss%2Fw+rd&x=1", []string{pw, "p%40ss%2Fw+rd"}},
		"parameter named *pwd":  {"mysql://u@h/db?db_password=s3cr3t", []string{"s3cr3t"}},
		"token parameter":       {"redis://h/0?token=s3cr3t&secret=t0ps3cr3t", []string{"s3cr3t", "t0ps3cr3t"}},
		"bad port":              {"postgres://u:s3cr3t@h:port/db", []string{"s3cr3t"}},
		"bad escape":            {"postgres://u:pa%zzs3cr3t@h/db", []string{"pa%zzs3cr3t"}},
		"keyword/value":         {"host=h password='s3 cr3t' user=u", []string{"s3 cr3t"}},
		"'@' and ':' unescaped": {"postgres://u:p@ss:w0rd@h/db", []string{"p@ss:w0rd"}},
		"'/' unescaped":         {"postgres://u:1234/s3cr3t@h/db", []string{"1234/s3cr3t"}},
		"'//' forgotten":        {"u:s3cr3t@h:2379", []string{"s3cr3t"}},
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

// writings are the ways a password can be put into a URL's userinfo: as
// typed, where that reads back as the same password, and percent-encoded.
func writings(pw string) []string {
	escaped := strings.TrimPrefix(url.UserPassword("", pw).String(), ":")
	if strings.ContainsAny(pw, "/?#%") || escaped == pw {
		return []string{escaped}
	}
	return []string{pw, escaped}
}

func TestThePasswordRunsToTheLastAtSignOfTheAuthority(t *testing.T) {
	for _, pw := range []string{"p@ss", "p@ss:w0rd", "a:b@c@d", "Qx7 Zr9", "pässwörd✓", "p%40ss", "Qx7/Zr9", "Qx7?Zr9#", "a"} {
		for _, w := range writings(pw) {
			raw := "postgres://app:" + w + "@h.invalid:5432/db?sslmode=disable"
			rest, got, err := store.SplitURLPassword(raw)
			if err != nil || got != pw || rest != "postgres://app@h.invalid:5432/db?sslmode=disable" {
				t.Errorf("SplitURLPassword(%q) = %q, %q, %v; want the password %q and the URL without it", raw, rest, got, err, pw)
			}
			if shown := store.RedactURL(raw); shown != "postgres://app:xxxxx@h.invalid:5432/db?sslmode=disable" {
				t.Errorf("RedactURL(%q) = %q", raw, shown)
			}
			secrets := store.URLSecrets(raw)
			if !slices.Contains(secrets, pw) || !slices.Contains(secrets, w) {
				t.Errorf("URLSecrets(%q) = %q, want %q and %q among them", raw, secrets, pw, w)
			}
			for _, s := range secrets {
				if s != pw && strings.Contains(pw, s) {
					t.Errorf("URLSecrets(%q) = %q: %q is a piece of the password, which only a misreading finds", raw, secrets, s)
				}
			}
		}
	}
	// A user name is re-encoded, so that a parser splitting at the first
	// '@' reads the same user.
	if rest, pw, err := store.SplitURLPassword("redis://a@b:pw@h/0"); err != nil || pw != "pw" || rest != "redis://a%40b@h/0" {
		t.Errorf("SplitURLPassword with '@' in the user = %q, %q, %v", rest, pw, err)
	}
	if rest, pw, err := store.SplitURLPassword("redis://:pw@h/0"); err != nil || pw != "pw" || rest != "redis://h/0" {
		t.Errorf("SplitURLPassword without a user = %q, %q, %v", rest, pw, err)
	}
}

func TestAPasswordCutShortByAnUnencodedDelimiterIsRefusedUnseen(t *testing.T) {
	for _, raw := range []string{
		"postgres://app:1234/Zr9x@h/db",
		"postgres://app:1234?Zr9x@h/db",
		"redis://:1234#Zr9x@h/0",
		"mysql://app:Qx7%Zr9x@h/db",
	} {
		_, _, err := store.SplitURLPassword(raw)
		if !errors.Is(err, store.ErrInvalidURL) {
			t.Errorf("SplitURLPassword(%q) = %v, want ErrInvalidURL", raw, err)
		}
		shown := store.RedactURL(raw)
		for _, piece := range []string{"1234", "Zr9x", "Qx7"} {
			if err != nil && strings.Contains(err.Error(), piece) || strings.Contains(shown, piece) {
				t.Errorf("%q: error %v or shown URL %q holds %q", raw, err, shown, piece)
			}
		}
	}
	// An '@' in a parameter's value is no sign of a password.
	if _, _, err := store.SplitURLPassword("postgres://app:pw@h/db?application_name=me@home"); err != nil {
		t.Errorf("an '@' in a parameter value refused: %v", err)
	}
	if _, _, err := store.SplitURLPassword("sqlite:///var/lib/app@1/t.db"); err != nil {
		t.Errorf("an '@' in an SQLite path refused: %v", err)
	}
}

func TestURLWithoutSecretsStillNamesTheSameStore(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"postgres://app:p@ss@h:5432/db?sslmode=disable&password=x&sslpassword=y&application_name=me@home",
			"postgres://app@h:5432/db?sslmode=disable&application_name=me@home"},
		{"etcd://u:p@ss@h1:2379,h2?prefix=p&dial_timeout=1s", "etcd://u@h1:2379,h2?prefix=p&dial_timeout=1s"},
		{"redis://:pw@h:6379/0?namespace=ns", "redis://h:6379/0?namespace=ns"},
		{"mysql://root@h/db?token=t", "mysql://root@h/db"},
		{"sqlite:/var/lib/tenure.db?table=t", "sqlite:/var/lib/tenure.db?table=t"},
	} {
		if got, err := store.URLWithoutSecrets(tc.raw); err != nil || got != tc.want {
			t.Errorf("URLWithoutSecrets(%s) = %q, %v; want %q", store.RedactURL(tc.raw), got, err, tc.want)
		}
	}
	if _, err := store.URLWithoutSecrets("host=h password=pw"); !errors.Is(err, store.ErrInvalidURL) {
		t.Errorf("URLWithoutSecrets of a keyword/value string = %v, want ErrInvalidURL", err)
	}
}

func TestPasswordsNeverSurviveRedaction(t *testing.T) {
	const secret = "hunter2"
	for _, raw := range []string{
		"postgres://user:" + secret + "@db:5432/app",
		"redis://:" + secret + "@cache:6379/0",
		"mysql://root:" + secret + "@tcp(db:3306)/app",
		"postgres://db/app?password=" + secret,
		"host=db user=u password=" + secret + " dbname=app",
		"host=db password='" + secret + " with spaces'",
		"postgres://user:" + secret + "@[::1:bad",
		"%%%" + secret,
		"user:" + secret + "@h:2379",
		"etcd://u:" + secret + "@h1:2379,[::1]:2379",
		"redis://:" + secret + "@ss@h:6379/0",
	} {
		got := store.RedactURL(raw)
		if strings.Contains(got, secret) {
			t.Errorf("RedactURL(%q) = %q still holds the password", raw, got)
		}
	}
	err := store.RedactError(fmt.Errorf("dial postgres://u:%s@h: refused", secret), secret)
	if strings.Contains(err.Error(), secret) {
		t.Errorf("RedactError kept the password: %v", err)
	}
}

func TestRedactStringReplacesAnOrdinaryWordOnlyWhereItStandsAsTheCredential(t *testing.T) {
	for _, tc := range []struct {
		in      string
		secrets []string
		want    string
	}{
		// A password that is an ordinary word leaves the words alone.
		{"redis: connect to redis://:tcp@h: dial tcp: lookup h", []string{"tcp"},
			"redis: connect to redis://:xxxxx@h: dial tcp: lookup h"},
		{"postgres: connect to postgres://postgres:postgres@h/db", []string{"postgres"},
			"postgres: connect to postgres://postgres:xxxxx@h/db"},
		{"a host=h password=a user=a", []string{"a"}, "a host=h password=xxxxx user=a"},
		{`a "token": "a", sslpassword = 'a'`, []string{"a"}, `a "token": "xxxxx", sslpassword = 'xxxxx'`},
		{"auth failed for `s`, as s", []string{"s"}, "auth failed for `xxxxx`, as s"},
		// A distinctive one goes wherever it shows; the longest first.
		{"dial u:abcd1234@h: abcd1234", []string{"abcd1234"}, "dial u:xxxxx@h: xxxxx"},
		{"u:hunter2-s3cret@h hunter2-s3cret", []string{"hunter2-s3cret", "", "hunter2"}, "u:xxxxx@h xxxxx"},
	} {
		if got := store.RedactString(tc.in, tc.secrets...); got != tc.want {
			t.Errorf("RedactString(%q, %q) = %q, want %q", tc.in, tc.secrets, got, tc.want)
		}
	}
}
