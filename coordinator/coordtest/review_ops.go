package coordtest

// Tests from a review of enqueue and the job operations (2026-12-03). Run
// adds them to the suite.
var opsReviewTests = []suiteTest{}
