"""The worker processes of a container: the pool that starts, chooses and recycles them
(`processes`), the process itself where plugin code runs (`child`), the messages between
them (`protocol`), and running one chunk or merge on a process under a sampler (`runner`)."""
