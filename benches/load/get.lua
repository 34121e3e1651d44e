wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
