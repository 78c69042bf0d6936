package testenv

import (
	"runtime"
	"sync"
)

// IdleGoroutineHeap is the heap each of n goroutines takes that wait on a
// channel, as a pool's runner waits for its context: its descriptor,
// which the runtime never frees, and the record of its wait. A memory
// report sets it apart from Tenure's own heap, as the runner's stack is:
// it is what running the user's work takes, whatever runs it.
func IdleGoroutineHeap(n int) float64 {
	if n <= 0 {
		return 0
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	release := make(chan struct{})
	var waiting sync.WaitGroup
	waiting.Add(n)
	for range n {
		go func() {
			waiting.Done()
			<-release
		}()
	}
	waiting.Wait()
	runtime.GC()
	runtime.ReadMemStats(&after)
	close(release)
	return (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n)
}
