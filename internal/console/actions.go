package console

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/engine/poolkey"
	"github.com/tenure-dev/tenure/store"
)

// badAction is an action refused before it reached the store.
type badAction struct{ msg string }

func (e badAction) Error() string { return e.msg }

// moveCooldown is how long a moved key's holder stays away, as tenure
// move's default.
const moveCooldown = time.Minute

// act carries out an action, as the CLI command of the same name does,
// and says what it did. Errors from the store have their secrets
// scrubbed.
func (c *Console) act(ctx context.Context, a action) (string, error) {
	if err := store.ValidateKey(a.Key); err != nil {
		return "", badAction{err.Error()}
	}
	if !strings.HasPrefix(a.Key, c.cfg.Prefix) {
		return "", badAction{fmt.Sprintf("%q is outside this console's prefix %q", a.Key, c.cfg.Prefix)}
	}
	if _, isRecord := tenure.PausedKey(a.Key); isRecord || strings.Contains(a.Key, tenure.MoveInfix) {
		return "", badAction{fmt.Sprintf("%q is a pause or move record; act on the key itself", a.Key)}
	}
	if a.Op != "release" && poolkey.Reserved(a.Key) {
		return "", badAction{fmt.Sprintf("%q is a pool's key: only singleton keys can be paused or moved", a.Key)}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	scrub := func(err error) error {
		return fmt.Errorf("%s", store.RedactString(err.Error(), c.cfg.Secrets...))
	}
	switch a.Op {
	case "pause":
		if err := tenure.Pause(ctx, c.cfg.Store, a.Key); err != nil {
			return "", scrub(err)
		}
		return fmt.Sprintf("paused %s: its holder stops it within a renewal round", a.Key), nil
	case "resume":
		was, err := tenure.Resume(ctx, c.cfg.Store, a.Key)
		if err != nil {
			return "", scrub(err)
		}
		if !was {
			return fmt.Sprintf("%s was not paused", a.Key), nil
		}
		return fmt.Sprintf("resumed %s", a.Key), nil
	case "move":
		from, err := tenure.Move(ctx, c.cfg.Store, a.Key, a.To, moveCooldown)
		if err != nil {
			return "", scrub(err)
		}
		to := a.To
		if to == "" {
			to = "another replica"
		}
		return fmt.Sprintf("moving %s from %s to %s", a.Key, from, to), nil
	case "release":
		rv, ok := c.cfg.Store.(store.Revoker)
		if !ok {
			return "", badAction{"this store cannot revoke leases"}
		}
		revoked, err := rv.Revoke(ctx, a.Key)
		if err != nil {
			return "", scrub(err)
		}
		if !revoked {
			return fmt.Sprintf("%s has no live lease; nothing to release", a.Key), nil
		}
		return fmt.Sprintf("revoked %s; peers may take it after its expiry + grace", a.Key), nil
	}
	return "", badAction{fmt.Sprintf("unknown action %q: want move, pause, resume or release", a.Op)}
}
