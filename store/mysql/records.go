package mysql

import (
	"database/sql"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
)

// idsDoc is a JSON array of session ids. Sessions are few (one per owner
// and TTL), so it is never split.
func idsDoc(ids []int64) string {
	b := []byte{'['}
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(append(b, ']'))
}

// chunk is items [lo, hi) of a batch as the JSON document of one
// statement.
type chunk struct {
	lo, hi int
	doc    string
}

// docs splits n items into JSON arrays of at most maxBatchBytes (one item
// at least), item i written by item.
func docs(n int, item func(b []byte, i int) []byte) func(yield func(chunk) bool) {
	return func(yield func(chunk) bool) {
		buf := make([]byte, 0, min(maxBatchBytes, 64+n*48))
		var one []byte
		lo := 0
		for i := range n {
			one = item(one[:0], i)
			if i > lo && len(buf)+1+len(one)+1 > maxBatchBytes {
				if !yield(chunk{lo, i, string(append(buf, ']'))}) {
					return
				}
				buf, lo = buf[:0], i
			}
			if i == lo {
				buf = append(buf, '[')
			} else {
				buf = append(buf, ',')
			}
			buf = append(buf, one...)
		}
		if lo < n {
			yield(chunk{lo, n, string(append(buf, ']'))})
		}
	}
}

// chunks splits batch into documents with ["hex key", epoch, running] per
// item (running left out when withRunning is false).
func chunks(batch []batchItem, withRunning bool) func(yield func(chunk) bool) {
	return docs(len(batch), func(b []byte, i int) []byte {
		b = appendKey(append(b, '['), batch[i].term.Key)
		b = strconv.AppendInt(append(b, ','), batch[i].term.Epoch, 10)
		if withRunning {
			b = appendBool(append(b, ','), batch[i].running)
		}
		return append(b, ']')
	})
}

// appendKey appends key as a JSON string of hex digits.
func appendKey(b []byte, key string) []byte {
	b = append(b, '"')
	b = hex.AppendEncode(b, []byte(key))
	return append(b, '"')
}

func appendBool(b []byte, v bool) []byte { return append(b, byte('0'+boolInt(v))) }

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

// affected is the row count of a statement's result.
func affected(r sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// renewID draws the id that marks the rows one call writes. Two calls
// drawing the same one (odds 2⁻⁶³) could only credit each other's
// renewals of the same owner's terms.
func renewID() int64 { return rand.Int64N(1<<63-1) + 1 }
