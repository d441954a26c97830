"""The storage-backend suite: the same tests on local disk, memory, GCS, S3, WebHDFS and HDFS."""
