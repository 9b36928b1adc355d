from django.urls import path

from queue_app import api, views

urlpatterns = [
    path("api/queue/join", api.JoinView.as_view(), name="queue-join"),
    path("api/queue/rejoin", api.RejoinView.as_view(), name="queue-rejoin"),
    path("api/queue/leave", api.LeaveView.as_view(), name="queue-leave"),
    path("api/queue/challenge", api.ChallengeView.as_view(), name="queue-challenge"),
    path("api/status/poll", api.PollView.as_view(), name="status-poll"),
    path("api/queue/notify", api.NotifyView.as_view(), name="queue-notify"),
    path("api/queue/draw", api.DrawView.as_view(), name="queue-draw"),
    path("api/queue/draw/receipts", api.DrawReceiptsView.as_view(), name="queue-draw-receipts"),
    path("api/queue/draw/signed-receipt", api.SignedReceiptView.as_view(), name="queue-draw-signed-receipt"),
    path("api/events/<str:event_id>/seat-map", api.SeatMapView.as_view(), name="seat-map"),
    path("api/events/<str:event_id>/seats", api.SeatsView.as_view(), name="event-seats"),
    path("", views.event_list, name="event-list"),
    path("events/<str:event_id>/", views.waiting_room, name="waiting-room"),
    path("events/<str:event_id>/draw", views.draw_page, name="draw-page"),
    path("verify_draw.py", views.verify_script, name="verify-draw-script"),
]
