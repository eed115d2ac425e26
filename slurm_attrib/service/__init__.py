"""`sattrib serve`: the results store over HTTP (FastAPI on uvicorn), for users and admins."""
