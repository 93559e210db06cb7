package rocketmq

import "context"

// DeleteRouteForTest removes a topic's route from the name server only
// (DELETE_TOPIC_IN_NAMESRV), leaving the broker's topic: the state of a
// name server that has not heard of a topic yet.
func DeleteRouteForTest(ctx context.Context, a *Admin, topic string) error {
	_, err := a.call(ctx, a.namesrv, codeDeleteTopicInNamesrv, map[string]string{"topic": topic}, nil)
	return err
}
